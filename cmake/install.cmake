# Installs the libraries, headers, CLI and a CMake package: find_package(mmsparse) then link
# mmsparse::mmsparse (and mmsparse::tools). A CUDA build also installs the CUDA backend in an
# export set of its own, loaded only by find_package(mmsparse COMPONENTS cuda), so that a
# CPU-only consumer of a CUDA-built install needs no CUDA toolkit.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(mmsparse_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/mmsparse)
install(TARGETS mmsparse mmsparse_tools EXPORT mmsparseTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/mmsparse DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mmsparseTargets NAMESPACE mmsparse:: DESTINATION ${mmsparse_package_dir})
if(MMSPARSE_WITH_CUDA)
  install(TARGETS mmsparse_cuda mmsparse_cuda_whole EXPORT mmsparseCudaTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT mmsparseCudaTargets NAMESPACE mmsparse:: DESTINATION ${mmsparse_package_dir})
endif()
configure_package_config_file(cmake/mmsparseConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfig.cmake
  INSTALL_DESTINATION ${mmsparse_package_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfigVersion.cmake
  DESTINATION ${mmsparse_package_dir})
