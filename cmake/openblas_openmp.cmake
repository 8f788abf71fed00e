# Points find_package(BLAS) at Debian's OpenMP build of OpenBLAS
# (libopenblas-openmp-dev) when it is installed; otherwise BLAS is found where
# it always is (the pthread build that libopenblas-dev selects).  Shared by
# headroom's CMakeLists.txt and its installed package config.
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(_headroom_openblas_openmp /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
  if(EXISTS ${_headroom_openblas_openmp}/libopenblas.so AND NOT _headroom_openblas_openmp IN_LIST CMAKE_LIBRARY_PATH)
    list(PREPEND CMAKE_LIBRARY_PATH ${_headroom_openblas_openmp})
  endif()
  unset(_headroom_openblas_openmp)
endif()
