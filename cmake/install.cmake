# Installs the library, headers, CLI and a CMake package: find_package(mmsparse) then link
# mmsparse::mmsparse.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS mmsparse mmsparse_tools EXPORT mmsparseTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/mmsparse DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mmsparseTargets NAMESPACE mmsparse:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mmsparse)
configure_package_config_file(cmake/mmsparseConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mmsparse)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/mmsparseConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mmsparse)
