# cmake -DLIBRARY=<lib.so> -DOBJDUMP=<objdump> -P kolo_loaded_libraries.cmake
# Prints, one per line, the files that LIBRARY's libnccl.so* and
# libcudart.so* dependencies resolve to through LIBRARY's own RPATH, as the
# dynamic loader resolves them. Run by KoloTorch.cmake in script mode
# (file(GET_RUNTIME_DEPENDENCIES) is meant for install time, not configure).
set(CMAKE_GET_RUNTIME_DEPENDENCIES_PLATFORM "linux+elf")
set(CMAKE_GET_RUNTIME_DEPENDENCIES_TOOL "objdump")
set(CMAKE_GET_RUNTIME_DEPENDENCIES_COMMAND "${OBJDUMP}")
file(GET_RUNTIME_DEPENDENCIES
     LIBRARIES "${LIBRARY}"
     RESOLVED_DEPENDENCIES_VAR resolved
     UNRESOLVED_DEPENDENCIES_VAR unresolved
     PRE_INCLUDE_REGEXES "^libnccl\\.so" "^libcudart\\.so"
     PRE_EXCLUDE_REGEXES ".*")
foreach(dep IN LISTS resolved)
  get_filename_component(dep "${dep}" REALPATH)
  message("${dep}")
endforeach()
