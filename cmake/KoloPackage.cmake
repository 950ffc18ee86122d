# Installs libkolo and exports kolo::core (and kolo::torch when built) so a
# user's project can find_package(kolo).
include(CMakePackageConfigHelpers)

set(KOLO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)
install(EXPORT koloTargets NAMESPACE kolo:: DESTINATION ${KOLO_CMAKE_DIR})
configure_package_config_file(
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/koloConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/koloConfig.cmake
  INSTALL_DESTINATION ${KOLO_CMAKE_DIR})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/koloConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/koloConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/koloConfigVersion.cmake
        DESTINATION ${KOLO_CMAKE_DIR})
