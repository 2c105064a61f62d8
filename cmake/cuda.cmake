# The CUDA backend. Without it (SSMKIT_CUDA=OFF, or AUTO with no nvcc) src/cuda/stubs.cpp
# answers every CUDA tensor with an Unsupported status and the CPU build is unchanged.
#
# Targets sm_80 (A100) and sm_90 (H100/H200) machine code. No kernel uses wgmma or setmaxnreg,
# so there is no sm_90a build. One compilation per .cu and architecture, no dtype templates
# (dtypes are switched at run time inside the kernels), to keep CI's 2-core build short.
set(SSMKIT_HAS_CUDA OFF)
if(NOT SSMKIT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(SSMKIT_HAS_CUDA ON)
  elseif(SSMKIT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SSMKIT_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "ssmkit: no nvcc found, building without the CUDA backend")
  endif()
endif()

if(SSMKIT_HAS_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 knows no C++20 flag for nvcc 13: the kernels are C++17.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  option(SSMKIT_CUDA_PTXAS_VERBOSE "Print ptxas' register/spill report for every kernel" OFF)
  file(GLOB SSMKIT_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
  target_sources(ssmkit PRIVATE ${SSMKIT_CUDA_SOURCES})
  # ssmkit was created before CUDA was enabled, so it did not pick up the default.
  set_target_properties(ssmkit PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                          CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_compile_definitions(ssmkit PUBLIC SSMKIT_HAS_CUDA=1)
  target_compile_options(ssmkit PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${SSMKIT_CUDA_PTXAS_VERBOSE}>>:-Xptxas=-v>)
  target_link_libraries(ssmkit PUBLIC CUDA::cudart_static)
  # The engine's GEMMs (src/cuda/linear.cu). Shared: the static cuBLAS is hundreds of MB; the
  # GPU machine has the toolkit (bench/device/run.sh puts its lib64 on LD_LIBRARY_PATH). As
  # needed: a binary that never reaches LinearForward (the op GPU tests) does not load it.
  # Plain linker flags rather than a $<LINK_LIBRARY> feature, so that the projects linking the
  # static library (the Python module's, an installed package's consumers) need no definition.
  target_link_libraries(ssmkit PRIVATE "-Wl,--push-state,--as-needed" CUDA::cublas
                                       "-Wl,--pop-state")
  message(STATUS "ssmkit: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
else()
  target_sources(ssmkit PRIVATE ${PROJECT_SOURCE_DIR}/src/cuda/stubs.cpp)
endif()
