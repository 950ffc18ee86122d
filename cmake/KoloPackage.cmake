# Installs libkolo and exports kolo::core (and kolo::torch when built) so a
# user's project can find_package(kolo), with components: "core"
# (koloTargets.cmake: kolo::core, kolo::kolorun) and "torch"
# (koloTorchTargets.cmake: kolo::torch, which needs LibTorch);
# cmake/koloConfig.cmake.in says which it loads.
include(CMakePackageConfigHelpers)

set(KOLO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)
install(EXPORT koloTargets NAMESPACE kolo:: DESTINATION ${KOLO_CMAKE_DIR})
if(TARGET kolo_torch)
  install(EXPORT koloTorchTargets NAMESPACE kolo:: DESTINATION ${KOLO_CMAKE_DIR})
endif()
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

# RPATHs of everything installed (cmake/KoloInstall.cmake), set here, after
# every target exists, so the policy lives in one place. KOLO_RUNTIME_DIRS:
# where the external libraries a pip install relies on are (LibTorch's lib/,
# the CUDA runtime and NCCL it loads).
set(KOLO_RUNTIME_DIRS ${KOLO_TORCH_LIBRARY_DIR})
set(libs ${KOLO_TORCH_LOADED_CUDART})
if(KOLO_WITH_NCCL)
  list(APPEND libs ${KOLO_NCCL_LIBRARY})
endif()
foreach(lib ${libs})
  get_filename_component(dir ${lib} DIRECTORY)
  list(APPEND KOLO_RUNTIME_DIRS ${dir})
endforeach()
list(REMOVE_DUPLICATES KOLO_RUNTIME_DIRS)
kolo_install_rpath(kolo_core ${CMAKE_INSTALL_LIBDIR})
kolo_install_rpath(kolorun ${CMAKE_INSTALL_BINDIR})
if(TARGET kolo_torch)
  kolo_install_rpath(kolo_torch ${CMAKE_INSTALL_LIBDIR})
endif()
foreach(target kolo_python kolo_python_torch)
  if(TARGET ${target})
    kolo_install_rpath(${target} ${KOLO_PYTHON_PACKAGE_INSTALL_DIR})
  endif()
endforeach()

# Every shared object kolo installs exports kolo's API only
# (cmake/KoloExports.cmake).
kolo_export_api(kolo_core)
foreach(target kolo_torch kolo_python kolo_python_torch)
  if(TARGET ${target})
    kolo_export_api(${target})
  endif()
endforeach()
