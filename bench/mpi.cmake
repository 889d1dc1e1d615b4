# The MPI dispatchers' benchmark (only with the optional MPI component).
if(TARGET polymoe::mpi)
  add_executable(bench_mpi_dispatch ${CMAKE_CURRENT_LIST_DIR}/bench_mpi_dispatch.cpp)
  target_link_libraries(bench_mpi_dispatch PRIVATE polymoe::mpi polymoe_program_cli polymoe_project_options)
  polymoe_program_version(${CMAKE_CURRENT_LIST_DIR}/bench_mpi_dispatch.cpp)
endif()
# polymoe_nccl_bench: a2a::nccl_ragged between GPUs, against NCCL's all-to-all and one GPU (only
# with the optional NCCL component)
if(TARGET polymoe::nccl)
  add_executable(polymoe_nccl_bench ${CMAKE_CURRENT_LIST_DIR}/nccl_bench.cpp)
  target_link_libraries(polymoe_nccl_bench PRIVATE polymoe::nccl polymoe_program_cli polymoe_project_options)
  target_include_directories(polymoe_nccl_bench PRIVATE ${POLYMOE_NCCL_INCLUDE_DIR})
  polymoe_program_version(${CMAKE_CURRENT_LIST_DIR}/nccl_bench.cpp)
endif()
