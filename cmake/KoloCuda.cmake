# CUDA and NCCL detection. Included from the top-level CMakeLists.txt before
# core/, so build_config.h sees the results.
#
#   KOLO_WITH_CUDA  auto (ON when a CUDA compiler and the toolkit are found):
#                   comm/cuda kernels, GPU staging over MPI/Gloo, tests/gpu.
#   KOLO_WITH_NCCL  auto (ON when CUDA is on and nccl.h + libnccl are found):
#                   comm/nccl.
#   KOLO_NCCL_ROOT  extra NCCL prefix searched first, e.g. the pip wheel's
#                   $(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
#                   which has include/nccl.h and lib/libnccl.so.2 only (no
#                   unversioned libnccl.so). Link the NCCL LibTorch loads.
#   CMAKE_CUDA_ARCHITECTURES  default "90" (H100: sm_90 SASS + compute_90 PTX
#                   for newer GPUs); override with -DCMAKE_CUDA_ARCHITECTURES=...
#
# Defines kolo::nccl (imported) when KOLO_WITH_NCCL is ON.

option(KOLO_WITH_CUDA "Build the CUDA path (auto: when nvcc and the CUDA toolkit are found)" ON)
option(KOLO_WITH_NCCL "Build the NCCL backend (auto: when CUDA is on and NCCL is found)" ON)
set(KOLO_NCCL_ROOT "" CACHE PATH "NCCL prefix (include/nccl.h, lib/libnccl.so[.2]) searched first")

if(KOLO_WITH_CUDA)
  include(CheckLanguage)
  # nvcc is often not on PATH (e.g. in CI containers): look where the
  # toolkit installs it before giving up.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(KOLO_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH
                 PATHS /usr/local/cuda/bin PATH_SUFFIXES bin)
    if(KOLO_NVCC)
      set(CMAKE_CUDA_COMPILER ${KOLO_NVCC} CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (90 = sm_90 + PTX)")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit QUIET)
  endif()
  if(NOT CMAKE_CUDA_COMPILER OR NOT CUDAToolkit_FOUND)
    message(STATUS "CUDA not found: building without the CUDA path")
    set(KOLO_WITH_CUDA OFF)
  else()
    message(STATUS "CUDA ${CUDAToolkit_VERSION}: building the CUDA path "
                   "(architectures ${CMAKE_CUDA_ARCHITECTURES})")
  endif()
endif()

if(NOT KOLO_WITH_CUDA)
  set(KOLO_WITH_NCCL OFF)
endif()

if(KOLO_WITH_NCCL)
  # KOLO_NCCL_ROOT wins over everything else; then $NCCL_ROOT, the toolkit
  # and the system.
  set(_kolo_nccl_hints ${KOLO_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  if(KOLO_NCCL_ROOT)
    find_path(KOLO_NCCL_INCLUDE_DIR nccl.h PATHS ${KOLO_NCCL_ROOT} PATH_SUFFIXES include
              NO_DEFAULT_PATH)
    find_library(KOLO_NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${KOLO_NCCL_ROOT}
                 PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  endif()
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
      message(STATUS "NCCL ${KOLO_NCCL_VERSION}: ${KOLO_NCCL_LIBRARY}")
    endif()
  else()
    message(STATUS "NCCL not found (set KOLO_NCCL_ROOT): building without the NCCL backend")
    set(KOLO_WITH_NCCL OFF)
  endif()
endif()

# kolo_cuda_flags(TARGET): nvcc options for a target holding only .cu files.
# The directory-wide options (sanitizers from KoloSanitizers) are host C++
# flags that nvcc rejects, so they are dropped there: only kernels and their
# launch stubs live in such targets.
function(kolo_cuda_flags target)
  set_property(TARGET ${target} PROPERTY COMPILE_OPTIONS "")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall -Xcompiler=-Wextra>)
endfunction()
