# Installs that run from wherever they are put. Included from the top-level
# CMakeLists.txt before any target is created.
#
# kolo's own libraries are found relative to each installed binary ($ORIGIN),
# so `cmake --install build --prefix ANY` and pip installs need no
# LD_LIBRARY_PATH. External libraries outside the loader's default path:
#   - cmake --install: their directories as linked, absolute
#     (CMAKE_INSTALL_RPATH_USE_LINK_PATH): a venv's torch/lib, the CUDA
#     toolkit's lib, also when the venv is inside the checkout.
#     System libraries need none.
#   - pip (scikit-build-core, SKBUILD): nothing absolute from the build
#     environment. LibTorch's lib/ and the NCCL and CUDA runtime it loads
#     (pip's nvidia-* wheels) are named relative to site-packages, where the
#     package lands beside torch, so a wheel runs in any environment with
#     the same torch.

if(NOT SKBUILD)
  set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
endif()

# kolo_under(PATH ROOT OUT): OUT is TRUE when PATH lies inside ROOT.
function(kolo_under path root out)
  string(FIND "${path}" "${root}/" pos)
  if(NOT root STREQUAL "" AND pos EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# kolo_install_rpath(TARGET DESTINATION): TARGET's RPATH once installed to
# <prefix>/DESTINATION (a relative install destination).
function(kolo_install_rpath target dest)
  get_filename_component(from "/prefix/${dest}" ABSOLUTE)
  file(RELATIVE_PATH rel "${from}" "/prefix/${CMAKE_INSTALL_LIBDIR}")
  string(REGEX REPLACE "/$" "" rel "${rel}")
  if(rel STREQUAL "")
    set(rpath "$ORIGIN")
  else()
    set(rpath "$ORIGIN/${rel}")
  endif()
  if(NOT SKBUILD)
    # CMAKE_INSTALL_RPATH_USE_LINK_PATH leaves out directories inside the
    # source or build tree, such as a venv in the checkout's .cache/ (where
    # scripts/test.sh keeps pip's torch by default): name those ourselves,
    # or an install cannot load LibTorch or NCCL from there.
    foreach(dir IN LISTS KOLO_RUNTIME_DIRS)
      kolo_under("${dir}" "${CMAKE_SOURCE_DIR}" in_source)
      kolo_under("${dir}" "${CMAKE_BINARY_DIR}" in_build)
      if(in_source OR in_build)
        list(APPEND rpath "${dir}")
      endif()
    endforeach()
  elseif(KOLO_PYTHON_SITE_DIR)
    # The install prefix is site-packages/kolo (pyproject.toml).
    get_filename_component(from "${KOLO_PYTHON_SITE_DIR}/kolo/${dest}" ABSOLUTE)
    foreach(dir IN LISTS KOLO_RUNTIME_DIRS)
      kolo_under("${dir}" "${KOLO_PYTHON_SITE_DIR}" inside)
      if(inside)
        file(RELATIVE_PATH rel "${from}" "${dir}")
        string(REGEX REPLACE "/$" "" rel "${rel}")
        list(APPEND rpath "$ORIGIN/${rel}")
      endif()
    endforeach()
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
endfunction()
