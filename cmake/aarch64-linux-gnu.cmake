# Cross build for 64-bit ARM Linux (the `arm64` preset) with Debian 12's cross compiler
# (g++-aarch64-linux-gnu) against the arm64 multiarch libraries under /usr/lib/aarch64-linux-gnu
# (libhwy-dev:arm64 ...; scripts/test_arm64.sh installs them). ctest and gtest_discover_tests
# run the binaries under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR, below).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian's multiarch layout: the headers and libraries of both architectures share / (the
# cross compiler searches /usr/include/aarch64-linux-gnu and /usr/include), so there is no
# sysroot; the library architecture keeps find_library and find_package in the arm64 directories.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Debian 12 ships no aarch64-linux-gnu-pkg-config: the host's pkg-config, told where the arm64
# .pc files are (cmake/server.cmake's cpp-httplib).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# qemu's `max` CPU has every feature qemu emulates (NEON with AES, which Highway's NEON target
# requires; SVE and SVE2, which would serve SVE targets once the kernels build for them).
# No -L /usr/aarch64-linux-gnu: the loader must be libc6:arm64's (/lib/ld-linux-aarch64.so.1),
# from the same glibc build as the libc.so.6 that the arm64 libraries bring. Debian 12's
# libc6-arm64-cross lags it (2.36-8 against 2.36-9+deb12u*), and with its loader the newer libc
# loops forever in pthread_create, walking the thread-stack cache that ld.so and libc share:
# OpenBLAS starting its threads hung every test binary that links it.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu max)
