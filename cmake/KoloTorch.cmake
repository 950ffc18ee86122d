# LibTorch and the Python interpreter that goes with it. Included from the
# top-level CMakeLists.txt after KoloCuda (a CUDA LibTorch's CMake enables
# CUDA itself and must see the nvcc KoloCuda chose) and before KoloNccl
# (which links the NCCL this LibTorch loads) and core/.
#
#   KOLO_WITH_TORCH  auto (ON when LibTorch is found): adapters/torch and,
#                    with a matching interpreter, bindings/python.
#   KOLO_PYTHON      the interpreter to build the kolo package for. Without
#                    torch there, kolo is built without the LibTorch
#                    adapter: the framework-free package only (import kolo;
#                    no kolo.torch). With torch, it must be the torch
#                    whose LibTorch is linked: when that
#                    torch ships LibTorch's CMake files (pip's), they are
#                    used, whatever CMAKE_PREFIX_PATH / Torch_DIR say.
#                    Without it: scikit-build-core's interpreter (pip
#                    install), else the venv holding the LibTorch found
#                    (pip's torch), else the first of /usr/bin/python3 and
#                    python3 on PATH whose torch matches LibTorch.
#
# Supported LibTorch: 1.13 (Debian bookworm) to 2.11 (pip), both tested in
# CI. Older stops here; newer is built with a warning.
#
# Sets, when LibTorch is found:
#   TORCH_LIBRARIES, Torch_VERSION   (find_package(Torch))
#   KOLO_TORCH_CUDA                  ON when LibTorch is a CUDA build
#   KOLO_TORCH_LIBRARY_DIR           LibTorch's lib/ (libtorch.so, libc10.so)
#   KOLO_TORCH_LOADED_NCCL           the libnccl.so.2 file LibTorch loads (CUDA
#                                    LibTorch with a shared NCCL), else empty
#   KOLO_TORCH_LOADED_CUDART         the libcudart.so.N file LibTorch loads
#   KOLO_PYTHON_EXECUTABLE           interpreter for bindings/python (empty:
#                                    no interpreter imports this LibTorch)
#   KOLO_PYTHON_TORCH_VERSION        its torch.__version__ (e.g. 2.11.0+cu130)
#   KOLO_PYTHON_SITE_DIR             the site-packages holding its torch
#   KOLO_PYTHON_VERSION              its X.Y
#   KOLO_PYBIND11_DIR                its pybind11's CMake folder, if it has one

set(KOLO_TORCH_MIN_VERSION 1.13)
set(KOLO_TORCH_MAX_TESTED_VERSION 2.11)

option(KOLO_WITH_TORCH "Build the LibTorch adapter (auto: when LibTorch is found)" ON)
set(KOLO_PYTHON "" CACHE FILEPATH
    "Python interpreter to build the kolo package for (must import the LibTorch linked)")

set(KOLO_TORCH_CUDA OFF)
set(KOLO_TORCH_LIBRARY_DIR "")
set(KOLO_TORCH_LOADED_NCCL "")
set(KOLO_TORCH_LOADED_CUDART "")
set(KOLO_PYTHON_EXECUTABLE "")
set(KOLO_PYTHON_TORCH_VERSION "")
set(KOLO_PYTHON_SITE_DIR "")
set(KOLO_PYTHON_VERSION "")
set(KOLO_PYBIND11_DIR "")
if(NOT KOLO_WITH_TORCH)
  return()
endif()

# kolo_query_python(PYTHON PREFIX): runs PYTHON once and sets, in the
# caller, PREFIX_OK (it imports torch) and PREFIX_{TORCH_VERSION, SITE_DIR,
# CMAKE_PREFIX, VERSION, PYBIND11_DIR}.
function(kolo_query_python python prefix)
  set(script [=[
import os, sys, sysconfig
try:
    import pybind11
    pb = pybind11.get_cmake_dir()
except Exception:
    pb = ""
try:
    import torch
except Exception as e:
    if os.environ.get("KOLO_QUERY_TORCH_OPTIONAL") != "1":
        print("error: cannot import torch: %s" % e); sys.exit(1)
    print("")
    print(sysconfig.get_paths()["purelib"])
    print("")
    print("%d.%d" % sys.version_info[:2])
    print(pb)
    sys.exit(0)
print(torch.__version__)
print(os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))))
print(getattr(torch.utils, "cmake_prefix_path", ""))
print("%d.%d" % sys.version_info[:2])
print(pb)
]=])
  execute_process(COMMAND ${CMAKE_COMMAND} -E env KOLO_QUERY_TORCH_OPTIONAL=${KOLO_QUERY_TORCH_OPTIONAL}
                          ${python} -c "${script}" RESULT_VARIABLE rv
                  OUTPUT_VARIABLE out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rv EQUAL 0)
    set(${prefix}_OK FALSE PARENT_SCOPE)
    set(${prefix}_ERROR "${out}" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" out "${out}")
  list(LENGTH out n)
  if(n LESS 4)
    set(${prefix}_OK FALSE PARENT_SCOPE)
    return()
  endif()
  list(GET out 0 v)
  list(GET out 1 site)
  list(GET out 2 cmake_prefix)
  list(GET out 3 pyv)
  set(pb "")
  if(n GREATER 4)
    list(GET out 4 pb)
  endif()
  set(${prefix}_OK TRUE PARENT_SCOPE)
  set(${prefix}_TORCH_VERSION "${v}" PARENT_SCOPE)
  set(${prefix}_SITE_DIR "${site}" PARENT_SCOPE)
  set(${prefix}_CMAKE_PREFIX "${cmake_prefix}" PARENT_SCOPE)
  set(${prefix}_VERSION "${pyv}" PARENT_SCOPE)
  set(${prefix}_PYBIND11_DIR "${pb}" PARENT_SCOPE)
endfunction()

# kolo_python_development(PYTHON): pybind11 needs the Development.Module
# part of that interpreter (its headers); stops with what to install when
# they are missing.
# A macro: FindPython's results (Python_FOUND, which pybind11 reads) stay
# in the including scope.
macro(kolo_python_development python)
  set(Python_EXECUTABLE ${python} CACHE FILEPATH "" FORCE)
  find_package(Python COMPONENTS Interpreter Development.Module QUIET)
  if(NOT Python_Development.Module_FOUND)
    message(FATAL_ERROR "Python headers not found for ${python}: install python3-dev (apt) or "
                        "the interpreter's development files")
  endif()
endmacro()

# ---- the interpreter, when it is known before LibTorch: KOLO_PYTHON, or
# the one scikit-build-core runs for.
set(_kolo_py "")
if(KOLO_PYTHON)
  set(_kolo_py ${KOLO_PYTHON})
elseif(SKBUILD AND Python_EXECUTABLE)
  set(_kolo_py ${Python_EXECUTABLE})
endif()
if(_kolo_py)
  set(KOLO_QUERY_TORCH_OPTIONAL 1)
  kolo_query_python(${_kolo_py} _kolo_q)
  set(KOLO_QUERY_TORCH_OPTIONAL 0)
  if(NOT _kolo_q_OK)
    message(FATAL_ERROR "${_kolo_py} does not run (${_kolo_q_ERROR}): point -DKOLO_PYTHON at a "
                        "working interpreter")
  endif()
  if(_kolo_q_TORCH_VERSION STREQUAL "")
    # No torch there: the framework-free package (kolo, kolo._kolo) only;
    # no LibTorch adapter, no kolo.torch.
    message(STATUS "${_kolo_py} has no torch: building kolo without the LibTorch adapter "
                   "(import kolo works; kolo.torch needs torch, then a rebuild)")
    kolo_python_development(${_kolo_py})
    set(KOLO_WITH_TORCH OFF)
    set(KOLO_PYTHON_EXECUTABLE ${_kolo_py})
    set(KOLO_PYTHON_SITE_DIR ${_kolo_q_SITE_DIR})
    set(KOLO_PYTHON_VERSION ${_kolo_q_VERSION})
    set(KOLO_PYBIND11_DIR "${_kolo_q_PYBIND11_DIR}")
    return()
  endif()
  # That interpreter's LibTorch (pip's torch ships its CMake files; Debian's
  # python3-torch does not, and its LibTorch is found in the system).
  if(EXISTS "${_kolo_q_CMAKE_PREFIX}/Torch/TorchConfig.cmake")
    set(Torch_DIR "${_kolo_q_CMAKE_PREFIX}/Torch" CACHE PATH "LibTorch's CMake folder" FORCE)
  endif()
endif()

# LibTorch given by CMAKE_PREFIX_PATH (torch.utils.cmake_prefix_path): its
# Torch_DIR, so that the pinning below applies to it too.
if(NOT Torch_DIR)
  foreach(prefix IN LISTS CMAKE_PREFIX_PATH)
    foreach(sub Torch share/cmake/Torch lib/cmake/Torch)
      if(NOT Torch_DIR AND EXISTS "${prefix}/${sub}/TorchConfig.cmake")
        get_filename_component(Torch_DIR "${prefix}/${sub}" ABSOLUTE)
        set(Torch_DIR "${Torch_DIR}" CACHE PATH "LibTorch's CMake folder")
      endif()
    endforeach()
  endforeach()
endif()
# LibTorch's CMake looks for its own pieces with find_package(Caffe2 PATHS
# <its folder>) and find_library(torch|c10|... PATHS <its lib/>), which
# search the system first: with Debian's libtorch-dev installed, pip's
# LibTorch would be combined with Debian's Caffe2 and libc10 (LibTorch
# 1.13). Pin both searches to the install of the Torch_DIR in use
# (Caffe2_DIR, and Torch_ROOT: find_package's search prefix for every find
# inside it).
if(Torch_DIR AND EXISTS "${Torch_DIR}/../Caffe2/Caffe2Config.cmake")
  get_filename_component(_kolo_caffe2_dir "${Torch_DIR}/../Caffe2" ABSOLUTE)
  set(Caffe2_DIR "${_kolo_caffe2_dir}" CACHE PATH "LibTorch's Caffe2 CMake folder" FORCE)
  get_filename_component(Torch_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
endif()

# Caffe2's CMake looks for an interpreter of its own (any python3 on PATH)
# unless Python_EXECUTABLE names one.
if(_kolo_py)
  set(Python_EXECUTABLE ${_kolo_py} CACHE FILEPATH "" FORCE)
endif()

# A CUDA LibTorch's CMake needs the CUDA toolkit (else it stops with "Your
# installed Caffe2 version uses CUDA but I cannot find the CUDA libraries").
if(Torch_ROOT AND EXISTS "${Torch_ROOT}/lib/libtorch_cuda.so" AND NOT CMAKE_CUDA_COMPILER)
  find_program(_kolo_nvcc nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATHS /usr/local/cuda/bin
               PATH_SUFFIXES bin NO_CACHE)
  if(NOT _kolo_nvcc)
    message(FATAL_ERROR "LibTorch at ${Torch_ROOT} is a CUDA build, and building against it "
                        "needs the CUDA toolkit (nvcc), which was not found: install it (or set "
                        "CUDA_HOME), or use torch's CPU build (pip install torch "
                        "--index-url https://download.pytorch.org/whl/cpu)")
  endif()
endif()

# A CUDA LibTorch's Caffe2 setup takes its architectures from
# TORCH_CUDA_ARCH_LIST (for its own nvcc flags, which kolo does not use),
# else runs a program on the GPU to find them; it warns about
# CMAKE_CUDA_ARCHITECTURES and replaces it with OFF. Give it KoloCuda's
# choice as TORCH_CUDA_ARCH_LIST, hide CMAKE_CUDA_ARCHITECTURES from it and
# put that back afterwards, for kolo's own kernels.
set(_kolo_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "")
  foreach(arch IN LISTS _kolo_cuda_archs)
    if(arch MATCHES "^([0-9]+)([0-9])(-real|-virtual)?$")
      list(APPEND TORCH_CUDA_ARCH_LIST "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endforeach()
  if(TORCH_CUDA_ARCH_LIST STREQUAL "")
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
endif()
unset(CMAKE_CUDA_ARCHITECTURES)
unset(CMAKE_CUDA_ARCHITECTURES CACHE)
find_package(Torch QUIET)
unset(CMAKE_CUDA_ARCHITECTURES)
if(NOT _kolo_cuda_archs STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES "${_kolo_cuda_archs}" CACHE STRING "CUDA architectures (90 = sm_90 + PTX)")
endif()
# Every LibTorch library must come from that one install (a cache from a
# configure against another LibTorch keeps its find_library results).
if(Torch_FOUND AND Torch_ROOT)
  foreach(var TORCH_LIBRARY c10_LIBRARY C10_CUDA_LIBRARY)
    if(${var})
      kolo_under("${${var}}" "${Torch_ROOT}" _kolo_inside)
      if(NOT _kolo_inside)
        message(FATAL_ERROR "${var}=${${var}} is not part of the LibTorch at ${Torch_ROOT} "
                            "(left in CMakeCache.txt by a configure against another LibTorch?): "
                            "configure in a fresh build folder")
      endif()
    endif()
  endforeach()
endif()
if(NOT Torch_FOUND)
  if(_kolo_py OR SKBUILD)
    message(FATAL_ERROR "LibTorch not found for ${_kolo_py} (torch ${_kolo_q_TORCH_VERSION}): "
                        "reinstall torch there (pip install --force-reinstall torch)")
  endif()
  message(STATUS "LibTorch not found: building without the LibTorch adapter")
  set(KOLO_WITH_TORCH OFF)
  return()
endif()

string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kolo_torch_mm "${Torch_VERSION}")
if(_kolo_torch_mm VERSION_LESS KOLO_TORCH_MIN_VERSION)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} (${Torch_DIR}) is older than kolo supports "
                      "(${KOLO_TORCH_MIN_VERSION} to ${KOLO_TORCH_MAX_TESTED_VERSION}): install a "
                      "newer torch (pip install torch==2.11.0) or build with -DKOLO_WITH_TORCH=OFF")
endif()
if(_kolo_torch_mm VERSION_GREATER KOLO_TORCH_MAX_TESTED_VERSION)
  message(WARNING "LibTorch ${Torch_VERSION} is newer than the newest tested "
                  "(${KOLO_TORCH_MAX_TESTED_VERSION}); see docs/install.md, 'Supported versions'")
endif()
get_filename_component(KOLO_TORCH_LIBRARY_DIR "${TORCH_LIBRARY}" DIRECTORY)
if(TORCH_CUDA_LIBRARIES)
  set(KOLO_TORCH_CUDA ON)
endif()

# ---- the NCCL and CUDA runtime LibTorch loads: resolved through
# libtorch_cuda.so's own RPATH, as the dynamic loader does. pip's torch
# takes them from the nvidia-* wheels next to it.
if(KOLO_TORCH_CUDA AND EXISTS "${KOLO_TORCH_LIBRARY_DIR}/libtorch_cuda.so")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DLIBRARY=${KOLO_TORCH_LIBRARY_DIR}/libtorch_cuda.so
            -DOBJDUMP=${CMAKE_OBJDUMP} -P ${CMAKE_CURRENT_LIST_DIR}/kolo_loaded_libraries.cmake
    ERROR_VARIABLE _kolo_torch_deps RESULT_VARIABLE rv)
  string(REPLACE "\n" ";" _kolo_torch_deps "${_kolo_torch_deps}")
  foreach(dep IN LISTS _kolo_torch_deps)
    get_filename_component(name "${dep}" NAME)
    if(name MATCHES "^libnccl\\.so")
      set(KOLO_TORCH_LOADED_NCCL "${dep}")
    elseif(name MATCHES "^libcudart\\.so")
      set(KOLO_TORCH_LOADED_CUDART "${dep}")
    endif()
  endforeach()
endif()

# ---- the interpreter, when it was not given: the one whose torch is this
# LibTorch. A LibTorch inside <prefix>/lib/pythonX.Y/site-packages/torch
# (pip, a venv) belongs to <prefix>/bin/python3.
if(NOT _kolo_py)
  set(_kolo_candidates "")
  if(KOLO_TORCH_LIBRARY_DIR MATCHES "^(.*)/lib/python3\\.[0-9]+/site-packages/torch/lib$")
    list(APPEND _kolo_candidates "${CMAKE_MATCH_1}/bin/python3")
  endif()
  find_program(_kolo_path_python3 NAMES python3 NO_CACHE)
  list(APPEND _kolo_candidates /usr/bin/python3 ${_kolo_path_python3})
  foreach(candidate IN LISTS _kolo_candidates)
    if(EXISTS ${candidate})
      kolo_query_python(${candidate} _kolo_q)
      string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kolo_py_mm "${_kolo_q_TORCH_VERSION}")
      if(_kolo_q_OK AND _kolo_py_mm STREQUAL _kolo_torch_mm)
        set(_kolo_py ${candidate})
        break()
      endif()
    endif()
  endforeach()
  if(_kolo_py)
    set(Python_EXECUTABLE ${_kolo_py} CACHE FILEPATH "" FORCE)
  endif()
endif()

if(_kolo_py)
  # The module passes at::Tensor between the interpreter's torch and
  # libkolo_torch: both must be the same LibTorch release.
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kolo_py_mm "${_kolo_q_TORCH_VERSION}")
  if(NOT _kolo_py_mm STREQUAL _kolo_torch_mm)
    message(FATAL_ERROR
      "${_kolo_py} has torch ${_kolo_q_TORCH_VERSION}, but the LibTorch found is "
      "${Torch_VERSION} (${Torch_DIR}). Use that interpreter's: drop CMAKE_PREFIX_PATH/Torch_DIR "
      "or set -DCMAKE_PREFIX_PATH=$(${_kolo_py} -c 'import torch;print(torch.utils.cmake_prefix_path)')")
  endif()
  # After LibTorch (whose CMake asks for the interpreter alone).
  kolo_python_development(${_kolo_py})
  set(KOLO_PYTHON_EXECUTABLE ${_kolo_py})
  set(KOLO_PYTHON_TORCH_VERSION ${_kolo_q_TORCH_VERSION})
  set(KOLO_PYTHON_SITE_DIR ${_kolo_q_SITE_DIR})
  set(KOLO_PYTHON_VERSION ${_kolo_q_VERSION})
  set(KOLO_PYBIND11_DIR "${_kolo_q_PYBIND11_DIR}")
elseif(SKBUILD)
  message(FATAL_ERROR "no interpreter imports LibTorch ${Torch_VERSION}")
else()
  message(STATUS "No Python interpreter imports LibTorch ${Torch_VERSION} (${Torch_DIR}): "
                 "skipping the kolo Python package (set -DKOLO_PYTHON=/path/to/python)")
endif()

set(_kolo_torch_desc "LibTorch ${Torch_VERSION}")
if(KOLO_TORCH_CUDA)
  string(APPEND _kolo_torch_desc " with CUDA")
endif()
message(STATUS "${_kolo_torch_desc}: ${KOLO_TORCH_LIBRARY_DIR}")
# For scripts/test.sh, which requires a CUDA LibTorch in its torch 2.11 stage.
set(KOLO_TORCH_CUDA_BUILD ${KOLO_TORCH_CUDA} CACHE INTERNAL "LibTorch has CUDA")
