# CUDA detection: the compiler and the toolkit. Included from the top-level
# CMakeLists.txt before KoloTorch (a CUDA LibTorch enables CUDA itself and
# must see the same nvcc), KoloNccl and core/, so build_config.h sees the
# results.
#
#   KOLO_WITH_CUDA  auto (ON when a CUDA compiler and the toolkit are found):
#                   comm/cuda kernels, GPU staging over MPI/Gloo, tests/gpu.
#   CMAKE_CUDA_ARCHITECTURES  default: the architectures of the GPUs this
#                   machine has (nvidia-smi's compute_cap: 80 on an A100,
#                   70 on a V100), or "90" (H100: sm_90 SASS + compute_90
#                   PTX for newer GPUs) where it sees none, as on a build
#                   machine; override with -DCMAKE_CUDA_ARCHITECTURES=...
#                   (70 or newer; "80;90" builds for both).
#   KOLO_REQUIRE_GPU  OFF; ON (the torch2 preset) makes a missing CUDA
#                   compiler, toolkit or NCCL a configure error instead of
#                   a build without them.
# Needs CUDA 12.1 or newer (kernel parameters of up to 32 KB).
#
# NCCL is found in KoloNccl.cmake, after LibTorch.

option(KOLO_WITH_CUDA "Build the CUDA path (auto: when nvcc and the CUDA toolkit are found)" ON)
option(KOLO_REQUIRE_GPU "Fail at configure when CUDA or NCCL is not found" OFF)

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
      # The GPUs of this machine, when it has any: kernels built for sm_90
      # do not load on an A100 (sm_80) or a V100 (sm_70).
      set(_kolo_archs "")
      find_program(KOLO_NVIDIA_SMI nvidia-smi)
      if(KOLO_NVIDIA_SMI)
        execute_process(COMMAND ${KOLO_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                        OUTPUT_VARIABLE _kolo_caps RESULT_VARIABLE _kolo_smi_rc
                        ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 20)
        if(_kolo_smi_rc EQUAL 0)
          string(REPLACE "\n" ";" _kolo_caps "${_kolo_caps}")
          foreach(cap IN LISTS _kolo_caps)
            if(cap MATCHES "^ *([0-9]+)\\.([0-9]+)")
              list(APPEND _kolo_archs "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
            endif()
          endforeach()
          list(REMOVE_DUPLICATES _kolo_archs)
        endif()
      endif()
      if(_kolo_archs)
        message(STATUS "CUDA architectures: ${_kolo_archs}, this machine's GPUs (nvidia-smi); "
                       "-DCMAKE_CUDA_ARCHITECTURES=... builds for others")
      else()
        set(_kolo_archs 90)
        message(STATUS "CUDA architectures: 90 (H100; no GPU visible here). For another GPU "
                       "pass -DCMAKE_CUDA_ARCHITECTURES=80 (A100), 86 (A10, RTX 30xx), "
                       "89 (L4, L40), 75 (T4), or a list such as \"80;90\" (70, the V100, needs "
                       "CUDA 12: CUDA 13 starts at 75)")
      endif()
      set(CMAKE_CUDA_ARCHITECTURES "${_kolo_archs}" CACHE STRING
          "CUDA architectures (default: this machine's GPUs, else 90 = sm_90 + PTX)")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit QUIET)
  endif()
  if(NOT CMAKE_CUDA_COMPILER OR NOT CUDAToolkit_FOUND)
    if(KOLO_REQUIRE_GPU)
      message(FATAL_ERROR "KOLO_REQUIRE_GPU (the torch2 preset): no CUDA compiler and toolkit "
                          "found. Put the CUDA toolkit's nvcc (12.1 or newer) on PATH or set "
                          "CUDACXX, or configure without the GPU path (--preset default)")
    endif()
    message(STATUS "CUDA not found: building without the CUDA path")
    set(KOLO_WITH_CUDA OFF)
  elseif(CUDAToolkit_VERSION VERSION_LESS 12.1)
    # The pack kernel takes its descriptors as up to 32 KB of kernel
    # parameters (device/cuda/batched_copy.cu).
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
