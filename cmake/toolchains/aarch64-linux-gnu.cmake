# Cross-compiles for 64-bit Arm Linux with Debian's cross toolchain, and runs
# the results (try_run, ctest, doctest_discover_tests) under qemu-user.
# Debian 12 packages: g++-aarch64-linux-gnu qemu-user libopenblas-openmp-dev:arm64
# libstdc++6:arm64 (after `dpkg --add-architecture arm64`); scripts/test-aarch64
# installs them.
#   cmake -S . -B build/aarch64 --toolchain cmake/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian's cross compiler has the sysroot "/" and finds both its own C library
# (/usr/aarch64-linux-gnu) and multiarch arm64 packages (/usr/lib/aarch64-linux-gnu,
# /usr/include/aarch64-linux-gnu).  With CMAKE_LIBRARY_ARCHITECTURE set, find_*
# look in those multiarch folders, and never in the host's x86_64-linux-gnu
# ones: OpenBLAS, libgomp and cblas.h are the arm64 ones, while the
# architecture-independent headers (doctest's CMake package, stb) are found where
# the native packages put them.  Programs (qemu, tools) are the host's.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# The binaries run on the multiarch arm64 runtime (libc6:arm64, which OpenBLAS
# depends on, and libstdc++6:arm64): /lib/ld-linux-aarch64.so.1 exists, so qemu
# needs no -L.  `-L /usr/aarch64-linux-gnu` would load the cross toolchain's
# ld.so (glibc 2.36-8cross1) while /etc/ld.so.cache still points it at
# libc6:arm64's libc.so.6 (2.36-9+deb12u*): the mismatched pair hung in the
# first pthread_create, i.e. in the first OpenMP region.
find_program(HEADROOM_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${HEADROOM_QEMU_AARCH64})
