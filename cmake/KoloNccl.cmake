# NCCL detection. Included from the top-level CMakeLists.txt after KoloCuda
# and KoloTorch, before core/ (build_config.h sees the result).
#
#   KOLO_WITH_NCCL  auto (ON when CUDA is on and nccl.h + libnccl, 2.14 or
#                   newer, are found): comm/nccl.
#   KOLO_NCCL_ROOT  NCCL prefix (include/nccl.h, lib/libnccl.so[.2]) searched
#                   first. Default: the NCCL that LibTorch loads, when it is
#                   a CUDA build with a shared NCCL (pip's torch: the
#                   nvidia-nccl wheel next to it, which has only
#                   lib/libnccl.so.2, no unversioned libnccl.so); else
#                   $NCCL_ROOT, the CUDA toolkit and the system.
#
# One process must load one NCCL: kolo and LibTorch share libnccl.so.2 by
# its soname, so kolo links the file LibTorch resolves (KoloTorch.cmake
# reads it from libtorch_cuda.so's RPATH, as the dynamic loader does).
#
# Defines kolo::nccl (imported) when KOLO_WITH_NCCL is ON.

option(KOLO_WITH_NCCL "Build the NCCL backend (auto: when CUDA is on and NCCL is found)" ON)
set(KOLO_NCCL_ROOT "" CACHE PATH "NCCL prefix (include/nccl.h, lib/libnccl.so[.2]) searched first")

if(NOT KOLO_WITH_CUDA)
  set(KOLO_WITH_NCCL OFF)
endif()

if(KOLO_WITH_NCCL)
  set(_kolo_nccl_root "${KOLO_NCCL_ROOT}")
  set(_kolo_nccl_origin "KOLO_NCCL_ROOT")
  if(NOT _kolo_nccl_root AND KOLO_TORCH_LOADED_NCCL)
    # <root>/lib/libnccl.so.2 -> <root>
    get_filename_component(_kolo_nccl_root "${KOLO_TORCH_LOADED_NCCL}" DIRECTORY)
    get_filename_component(_kolo_nccl_root "${_kolo_nccl_root}" DIRECTORY)
    set(_kolo_nccl_origin "the NCCL LibTorch loads")
  endif()
  # The root chosen now wins over an earlier configure's cached pick.
  kolo_under("${KOLO_NCCL_LIBRARY}" "${_kolo_nccl_root}" _kolo_nccl_cached_ok)
  if(_kolo_nccl_root AND NOT _kolo_nccl_cached_ok)
    unset(KOLO_NCCL_LIBRARY CACHE)
    unset(KOLO_NCCL_INCLUDE_DIR CACHE)
  endif()
  if(_kolo_nccl_root)
    find_path(KOLO_NCCL_INCLUDE_DIR nccl.h PATHS ${_kolo_nccl_root} PATH_SUFFIXES include
              NO_DEFAULT_PATH)
    find_library(KOLO_NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${_kolo_nccl_root}
                 PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  endif()
  set(_kolo_nccl_hints $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  find_path(KOLO_NCCL_INCLUDE_DIR nccl.h
            HINTS ${_kolo_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(KOLO_NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${_kolo_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(KOLO_NCCL_INCLUDE_DIR AND KOLO_NCCL_LIBRARY)
    file(STRINGS ${KOLO_NCCL_INCLUDE_DIR}/nccl.h _kolo_nccl_version
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
    string(REGEX REPLACE ".*NCCL_MAJOR +([0-9]+).*NCCL_MINOR +([0-9]+).*NCCL_PATCH +([0-9]+).*"
           "\\1.\\2.\\3" KOLO_NCCL_VERSION "${_kolo_nccl_version}")
    if(KOLO_NCCL_VERSION VERSION_LESS 2.14)
      message(STATUS "NCCL ${KOLO_NCCL_VERSION} at ${KOLO_NCCL_LIBRARY} is older than 2.14 "
                     "(non-blocking communicators): building without the NCCL backend")
      set(KOLO_WITH_NCCL OFF)
    else()
      add_library(kolo::nccl UNKNOWN IMPORTED)
      set_target_properties(kolo::nccl PROPERTIES
        IMPORTED_LOCATION ${KOLO_NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${KOLO_NCCL_INCLUDE_DIR})
      get_filename_component(KOLO_NCCL_LIBRARY_DIR ${KOLO_NCCL_LIBRARY} DIRECTORY)
      kolo_under("${KOLO_NCCL_LIBRARY}" "${_kolo_nccl_root}" _kolo_nccl_from_root)
      if(_kolo_nccl_from_root)
        message(STATUS "NCCL ${KOLO_NCCL_VERSION}: ${KOLO_NCCL_LIBRARY} (${_kolo_nccl_origin})")
      else()
        message(STATUS "NCCL ${KOLO_NCCL_VERSION}: ${KOLO_NCCL_LIBRARY}")
      endif()
      if(KOLO_TORCH_LOADED_NCCL)
        get_filename_component(_kolo_nccl_real "${KOLO_NCCL_LIBRARY}" REALPATH)
        if(NOT _kolo_nccl_real STREQUAL KOLO_TORCH_LOADED_NCCL)
          message(WARNING "kolo links ${KOLO_NCCL_LIBRARY} but LibTorch loads "
                          "${KOLO_TORCH_LOADED_NCCL}: a process uses whichever libnccl.so.2 "
                          "loads first. Leave KOLO_NCCL_ROOT unset to link LibTorch's.")
        endif()
      endif()
    endif()
  else()
    message(STATUS "NCCL not found (set KOLO_NCCL_ROOT): building without the NCCL backend")
    set(KOLO_WITH_NCCL OFF)
  endif()
endif()

if(KOLO_REQUIRE_GPU AND NOT KOLO_WITH_NCCL)
  message(FATAL_ERROR "KOLO_REQUIRE_GPU (the torch2 preset): no NCCL 2.14 or newer found (see "
                      "above). pip's CUDA torch brings one (the nvidia-nccl wheel); otherwise set "
                      "KOLO_NCCL_ROOT to an NCCL prefix, or configure without the GPU path "
                      "(--preset default)")
endif()
