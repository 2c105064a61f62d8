# The C ABI (include/ssmkit/ssmkit.h): libssmkit.so exporting only the ssmkit_* symbols, built
# from src/capi on top of the static library the rest of the project uses; install rules for
# both, the CMake package (find_package(ssmkit)), the pkg-config file, and their tests.
enable_language(C)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The header's version macros are the single source; CMake's project version must agree.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/ssmkit/ssmkit.h SSMKIT_H_VERSION_LINES
     REGEX "^#define SSMKIT_(VERSION_MAJOR|VERSION_MINOR|VERSION_PATCH|ABI_VERSION) ")
foreach(line IN LISTS SSMKIT_H_VERSION_LINES)
  string(REGEX REPLACE "^#define SSMKIT_([A-Z_]+) ([0-9]+).*" "\\1;\\2" pair "${line}")
  list(GET pair 0 key)
  list(GET pair 1 value)
  set(SSMKIT_H_${key} ${value})
endforeach()
if(NOT "${SSMKIT_H_VERSION_MAJOR}.${SSMKIT_H_VERSION_MINOR}.${SSMKIT_H_VERSION_PATCH}" STREQUAL
   PROJECT_VERSION)
  message(FATAL_ERROR "include/ssmkit/ssmkit.h says version ${SSMKIT_H_VERSION_MAJOR}."
                      "${SSMKIT_H_VERSION_MINOR}.${SSMKIT_H_VERSION_PATCH}, project() says "
                      "${PROJECT_VERSION}: change both together")
endif()

file(GLOB SSMKIT_CAPI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/capi/*.cpp)
add_library(ssmkit_shared SHARED ${SSMKIT_CAPI_SOURCES})
target_include_directories(ssmkit_shared
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ssmkit_shared PRIVATE ssmkit)
target_compile_options(ssmkit_shared PRIVATE -Wall -Wextra)
target_link_options(ssmkit_shared PRIVATE
  "LINKER:--version-script=${PROJECT_SOURCE_DIR}/src/capi/ssmkit.map")
set_target_properties(ssmkit_shared PROPERTIES
  OUTPUT_NAME ssmkit EXPORT_NAME ssmkit
  VERSION ${PROJECT_VERSION} SOVERSION ${SSMKIT_H_ABI_VERSION}
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/src/capi/ssmkit.map)

# The static C++ library, installed beside it for C++ users (and the Python package's build).
target_include_directories(ssmkit PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(ssmkit PROPERTIES EXPORT_NAME ssmkit_static)

set(SSMKIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ssmkit)
install(TARGETS ssmkit_shared EXPORT ssmkitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ssmkit EXPORT ssmkitStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ssmkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ssmkitTargets NAMESPACE ssmkit:: DESTINATION ${SSMKIT_CMAKE_DIR})
install(EXPORT ssmkitStaticTargets NAMESPACE ssmkit:: DESTINATION ${SSMKIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ssmkitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ssmkitConfig.cmake INSTALL_DESTINATION ${SSMKIT_CMAKE_DIR})
# 0.x: a new minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ssmkitConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ssmkitConfig.cmake ${PROJECT_BINARY_DIR}/ssmkitConfigVersion.cmake
        DESTINATION ${SSMKIT_CMAKE_DIR})

# pkg-config, relocatable: the prefix is found from the .pc file's own place.
file(RELATIVE_PATH SSMKIT_PC_TO_PREFIX "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
configure_file(${PROJECT_SOURCE_DIR}/cmake/ssmkit.pc.in ${PROJECT_BINARY_DIR}/ssmkit.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ssmkit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(SSMKIT_BUILD_TESTS)
  # A C11 program (compiled as C, pedantic) calling every op forward and backward.
  add_executable(capi_c11_test ${PROJECT_SOURCE_DIR}/tests/capi/capi_c11_test.c)
  set_target_properties(capi_c11_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_options(capi_c11_test PRIVATE -Wall -Wextra -pedantic -Werror)
  target_link_libraries(capi_c11_test PRIVATE ssmkit_shared m)
  add_test(NAME capi_c11_test COMMAND capi_c11_test)
  set_tests_properties(capi_c11_test PROPERTIES LABELS cpu TIMEOUT 300)

  # The engine through the C ABI (C11 too): the fixture checkpoints' logits and greedy
  # continuations against transformers', tokenizers, generation, the built-in model, bad inputs.
  add_executable(capi_model_test ${PROJECT_SOURCE_DIR}/tests/capi/capi_model_test.c)
  set_target_properties(capi_model_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_options(capi_model_test PRIVATE -Wall -Wextra -pedantic -Werror)
  target_compile_definitions(capi_model_test PRIVATE
                             SSMKIT_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
  target_link_libraries(capi_model_test PRIVATE ssmkit_shared m)
  add_test(NAME capi_model_test COMMAND capi_model_test)
  set_tests_properties(capi_model_test PROPERTIES LABELS cpu TIMEOUT 300)

  add_test(NAME capi_exports COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:ssmkit_shared>
                                     -P ${PROJECT_SOURCE_DIR}/tests/capi/check_exports.cmake)
  set_tests_properties(capi_exports PROPERTIES LABELS cpu)

  # Installs into a scratch prefix and builds consumers there: find_package(ssmkit) from C and
  # from C++ (the static library), and a plain `cc $(pkg-config --cflags --libs ssmkit)`.
  # Not under the sanitizers: an instrumented libssmkit.so needs an instrumented consumer.
  if(NOT CMAKE_CXX_FLAGS MATCHES "sanitize")
    add_test(NAME capi_install_consumer
             COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                     -DSOURCE_DIR=${PROJECT_SOURCE_DIR}/tests/capi/consumer
                     -DWORK_DIR=${PROJECT_BINARY_DIR}/capi_install_test
                     -DC_COMPILER=${CMAKE_C_COMPILER}
                     -P ${PROJECT_SOURCE_DIR}/tests/capi/install_consumer.cmake)
    set_tests_properties(capi_install_consumer PROPERTIES LABELS cpu TIMEOUT 600)
  endif()
endif()
