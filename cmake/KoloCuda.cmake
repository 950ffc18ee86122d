# CUDA detection: the compiler and the toolkit. Included from the top-level
# CMakeLists.txt before KoloTorch (a CUDA LibTorch enables CUDA itself and
# must see the same nvcc), KoloNccl and core/, so build_config.h sees the
# results.
#
#   KOLO_WITH_CUDA  auto (ON when a CUDA compiler and the toolkit are found):
#                   comm/cuda kernels, GPU staging over MPI/Gloo, tests/gpu.
#   CMAKE_CUDA_ARCHITECTURES  default "90" (H100: sm_90 SASS + compute_90 PTX
#                   for newer GPUs); override with -DCMAKE_CUDA_ARCHITECTURES=...
#                   (70 or newer).
# Needs CUDA 12.1 or newer (kernel parameters of up to 32 KB).
#
# NCCL is found in KoloNccl.cmake, after LibTorch.

option(KOLO_WITH_CUDA "Build the CUDA path (auto: when nvcc and the CUDA toolkit are found)" ON)

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
  elseif(CUDAToolkit_VERSION VERSION_LESS 12.1)
    # The pack kernel takes its descriptors as up to 32 KB of kernel
    # parameters (comm/cuda/batched_copy.cu).
    message(FATAL_ERROR "CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_BIN_DIR} is older than "
                        "kolo's CUDA path needs (12.1): install CUDA 12.1 or newer, or build "
                        "without it (-DKOLO_WITH_CUDA=OFF)")
  else()
    foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      if(arch MATCHES "^([0-9]+)" AND CMAKE_MATCH_1 LESS 70)
        message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}: kolo's CUDA "
                            "path needs sm_70 (Volta) or newer; drop ${arch}")
      endif()
    endforeach()
    message(STATUS "CUDA ${CUDAToolkit_VERSION}: building the CUDA path "
                   "(architectures ${CMAKE_CUDA_ARCHITECTURES})")
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
