# ctest capi_install_consumer: installs the build tree into a scratch prefix, then builds and
# runs consumers against the installed files only: find_package(ssmkit) from C (the shared C
# ABI) and from C++ (COMPONENTS static), and a compiler line from pkg-config.
# Inputs: BUILD_DIR, SOURCE_DIR (tests/capi/consumer), WORK_DIR, C_COMPILER.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " line "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${line}\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${ARGV0} ${ARGV1} ${ARGV2}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer_c)
run(${WORK_DIR}/build/consumer_cxx)

# pkg-config finds the .pc under the prefix on its own (relocatable, no absolute paths in it).
file(GLOB_RECURSE pc_files ${prefix}/*/ssmkit.pc)
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --cflags --libs ssmkit OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs ssmkit failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND pkg-config --variable=libdir ssmkit OUTPUT_VARIABLE libdir
                OUTPUT_STRIP_TRAILING_WHITESPACE)
run(${C_COMPILER} -std=c11 -Wall -Wextra -pedantic -Werror ${SOURCE_DIR}/consumer.c ${flags}
    -Wl,-rpath,${libdir} -o ${WORK_DIR}/consumer_pkgconfig)
run(${WORK_DIR}/consumer_pkgconfig)
