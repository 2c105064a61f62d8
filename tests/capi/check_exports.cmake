# ctest capi_exports: libssmkit.so exports the C ABI's ssmkit_* functions and nothing else
# (the C++ code linked into it is local: it cannot clash with a host's own copy).
# Input: LIBRARY, the path of libssmkit.so.
execute_process(COMMAND nm -D --defined-only ${LIBRARY} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D ${LIBRARY} failed")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${symbols}")
set(count 0)
foreach(line IN LISTS lines)
  string(REGEX REPLACE ".* " "" name "${line}")
  string(REGEX REPLACE "@.*" "" name "${name}")
  if(name STREQUAL "SSMKIT_1")  # the symbol version node
    continue()
  endif()
  if(NOT name MATCHES "^ssmkit_")
    message(FATAL_ERROR "libssmkit.so exports ${name}: only ssmkit_* may be exported")
  endif()
  math(EXPR count "${count} + 1")
endforeach()
if(count LESS 20)
  message(FATAL_ERROR "libssmkit.so exports only ${count} ssmkit_* functions")
endif()
message(STATUS "libssmkit.so exports ${count} functions, all ssmkit_*")
