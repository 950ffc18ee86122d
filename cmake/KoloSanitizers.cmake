# KOLO_SANITIZE=address,undefined or thread: applied to every target.
if(KOLO_SANITIZE)
  set(_kolo_san_flags -fsanitize=${KOLO_SANITIZE} -fno-omit-frame-pointer)
  if(KOLO_SANITIZE MATCHES "undefined")
    list(APPEND _kolo_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_kolo_san_flags})
  add_link_options(-fsanitize=${KOLO_SANITIZE})
endif()
