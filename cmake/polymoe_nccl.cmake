# The optional NCCL component (cuda/nccl: target polymoe::nccl, the dispatchers that carry CUDA
# memory between GPUs, <polymoe/nccl.hpp>). POLYMOE_NCCL: AUTO, ON or OFF, as POLYMOE_CUDA. It
# needs the CUDA component, MPI (its processes start under mpirun, which also carries NCCL's
# unique id) and NCCL's header and library (Debian: libnccl-dev, in non-free).
include(${CMAKE_CURRENT_LIST_DIR}/polymoe_component.cmake)
polymoe_component_mode(NCCL "Build the NCCL component polymoe::nccl")

set(POLYMOE_HAS_NCCL OFF)
set(polymoe_nccl_reason "")
if(polymoe_component_mode STREQUAL "OFF")
  set(polymoe_nccl_reason "POLYMOE_NCCL=OFF")
elseif(NOT TARGET polymoe::cuda)
  set(polymoe_nccl_reason "it needs the CUDA component (${polymoe_cuda_reason})")
elseif(NOT TARGET polymoe::mpi)
  set(polymoe_nccl_reason "it needs MPI (its processes start under mpirun)")
else()
  find_path(POLYMOE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(POLYMOE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(POLYMOE_NCCL_INCLUDE_DIR AND POLYMOE_NCCL_LIBRARY)
    set(POLYMOE_HAS_NCCL ON)
  else()
    set(polymoe_nccl_reason "nccl.h or libnccl not found (Debian: libnccl-dev, in non-free)")
  endif()
endif()

polymoe_component_finish(NCCL NCCL POLYMOE_HAS_NCCL "${polymoe_nccl_reason}" "${POLYMOE_NCCL_LIBRARY}" cuda/nccl)
