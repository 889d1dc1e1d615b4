# The MPI dispatchers' benchmark (only with the optional MPI component).
if(TARGET polymoe::mpi)
  add_executable(bench_mpi_dispatch ${CMAKE_CURRENT_LIST_DIR}/bench_mpi_dispatch.cpp)
  target_link_libraries(bench_mpi_dispatch PRIVATE polymoe::mpi polymoe_program_cli polymoe_project_options)
  polymoe_program_version(${CMAKE_CURRENT_LIST_DIR}/bench_mpi_dispatch.cpp)
endif()
