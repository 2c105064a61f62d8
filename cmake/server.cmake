# `ssmkit serve` (src/server/): the OpenAI-compatible server and its Jinja chat templates, a
# library of its own over libssmkit's public API, linked into the CLI. cpp-httplib comes from
# Debian's libcpp-httplib-dev (scripts/install_deps.sh); its pkg-config file carries the
# defines its shared library was built with (TLS, zlib, brotli), which its header must see.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
file(GLOB SSMKIT_SERVER_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/server/*.cpp
     ${PROJECT_SOURCE_DIR}/src/server/jinja/*.cpp)
add_library(ssmkit_server STATIC ${SSMKIT_SERVER_SOURCES})
target_include_directories(ssmkit_server PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ssmkit_server PUBLIC ssmkit nlohmann_json::nlohmann_json PkgConfig::HTTPLIB
                      PRIVATE ICU::uc)
target_compile_options(ssmkit_server PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_link_libraries(ssmkit_cli PRIVATE ssmkit_server)
