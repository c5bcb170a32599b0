# Generates cuGetProcAddress's table from cuda_procs.txt (name, version,
# symbol, per-thread symbol or "-"): one C initializer per line, in the
# list's order (by name, then version ascending).
# Usage: cmake -DPROCS=cuda_procs.txt -DOUT=procs.gen.inc -P gen_procs.cmake
file(STRINGS "${PROCS}" lines REGEX "^[^#]")
set(out "// Generated from cuda_procs.txt by gen_procs.cmake. Do not edit.\n")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "[ \t]+" ";" parts "${line}")
  list(GET parts 0 name)
  list(GET parts 1 version)
  list(GET parts 2 sym)
  list(GET parts 3 ptsym)
  if(ptsym STREQUAL "-")
    set(ptsym "")
  endif()
  string(APPEND out "{\"${name}\", ${version}, \"${sym}\", \"${ptsym}\"},\n")
endforeach()
file(WRITE "${OUT}.tmp" "${out}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
