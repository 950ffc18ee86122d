# kolo_export_api(TARGET...): each shared object exports kolo's API and
# nothing else (cmake/kolo_exports.map). A library that exports the C++
# standard library's template instantiations, or a statically linked
# libstdc++, serves them to every library loaded after it: Gloo's
# std::ostream calls then ran in libkolo_core's copy and crashed (issue 23).
# tests/package/check_exports.sh reads the exported symbols of what is
# installed. GNU ld and lld only (the supported toolchains on Linux).
set(KOLO_EXPORTS_MAP ${CMAKE_CURRENT_LIST_DIR}/kolo_exports.map)
function(kolo_export_api)
  foreach(target IN LISTS ARGN)
    target_link_options(${target} PRIVATE "LINKER:--version-script=${KOLO_EXPORTS_MAP}")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${KOLO_EXPORTS_MAP})
  endforeach()
endfunction()
