# The optional CUDA component (cuda/: target polymoe::cuda, the GPU expert engine). POLYMOE_CUDA:
#   AUTO  build it when a CUDA compiler and CUDAToolkit >= 12.4 are found, else say why not
#   ON    require it (configure fails with the reason)
#   OFF   skip it
# Nothing in the core depends on it; without it the project builds exactly as before.
include(${CMAKE_CURRENT_LIST_DIR}/polymoe_component.cmake)
polymoe_component_mode(CUDA "Build the CUDA component polymoe::cuda")

set(POLYMOE_HAS_CUDA OFF)
set(polymoe_cuda_reason "")
if(polymoe_component_mode STREQUAL "OFF")
  set(polymoe_cuda_reason "POLYMOE_CUDA=OFF")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(polymoe_cuda_reason "no CUDA compiler found (put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  else()
    # Hopper's own instructions need the arch-specific target (sm_90a), not plain sm_90.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    # One CUDA runtime in a process: the shared one, which CUDA::cudart names too (nvcc's default,
    # the static one, would put a second runtime beside it, and beside PyTorch's in Python).
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit 12.4 QUIET)
    if(NOT CUDAToolkit_FOUND)
      set(polymoe_cuda_reason "CUDAToolkit >= 12.4 not found (CUDA compiler ${CMAKE_CUDA_COMPILER})")
    else()
      set(POLYMOE_HAS_CUDA ON)
    endif()
  endif()
endif()

polymoe_component_finish(CUDA CUDA POLYMOE_HAS_CUDA "${polymoe_cuda_reason}"
                         "CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}" cuda)
