# The layer order (docs/architecture.md "Layers"), checked on the sources:
#   cmake -DROOT=<checkout> -P check_layers.cmake
# Every C/C++ file of a library may include headers of the libraries on lower floors and of its own
# library, never of a library on its own floor (siblings stay independent) or above. A library's
# headers are known by their include prefix (tandem/<library>/...); common's are tandem/<name>.h.
# The CMake files of experiments/ are checked the same way: target_link_libraries names only
# lower libraries. Prints one line per violation and fails when there is any.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<checkout>")
endif()

# floor, library, folder (relative to ROOT), include prefixes (a ';'-list inside '|'), link targets
set(LAYERS
  "0|common|common|tandem/%|tandem_common"
  "1|kernels|kernels|tandem/kernels/,tandem/cuda_probe/|tandem_kernels,tandem_cuda_probe"
  "2|data|data|tandem/data/|tandem_text,tandem_data"
  "2|engine|engine|tandem/engine/,tandem/engine_cuda/,tandem/engine_devices/,tandem_engine.h|tandem_engine,tandem_engine_io,tandem_engine_cuda,tandem_engine_devices,tandem_engine_c"
  "2|measure|experiments/measure|tandem/measure/|tandem_measure"
  "3|spec|experiments/spec|tandem/spec/|tandem_spec"
  "3|store|experiments/store|tandem/store/|tandem_store"
  "4|legs|experiments/legs|tandem/legs/|tandem_legs"
  "5|compare|experiments/compare|tandem/compare/|tandem_compare"
  "6|runner|experiments/runner|tandem/runner/|tandem_runner"
  "7|studies|experiments/studies|tandem/studies/|tandem_studies,tandem_experiments"
  "8|views|views|tandem/views/|tandem_views,tandem_views_models,tandem_views_widgets"
  "9|app|app|tandem/app/|tandem")

set(names "")
foreach(row IN LISTS LAYERS)
  string(REPLACE "|" ";" f "${row}")
  list(GET f 0 floor)
  list(GET f 1 name)
  list(GET f 2 folder)
  list(GET f 3 prefixes)
  list(GET f 4 targets)
  string(REPLACE "," ";" prefixes "${prefixes}")
  string(REPLACE "," ";" targets "${targets}")
  set(FLOOR_${name} ${floor})
  set(FOLDER_${name} ${folder})
  set(PREFIXES_${name} ${prefixes})
  foreach(t IN LISTS targets)
    set(TARGET_OF_${t} ${name})
  endforeach()
  list(APPEND names ${name})
endforeach()

# The library whose headers `inc` (the text between the quotes) names; "" for none of ours.
function(library_of inc out)
  foreach(n IN LISTS names)
    if(n STREQUAL "common")
      continue()
    endif()
    foreach(p IN LISTS PREFIXES_${n})
      string(LENGTH "${p}" len)
      string(SUBSTRING "${inc}" 0 ${len} head)
      if(head STREQUAL p)
        set(${out} ${n} PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endforeach()
  if(inc MATCHES "^tandem/[A-Za-z0-9_]+\\.h$")  # common's headers (and the generated tandem/version.h)
    set(${out} common PARENT_SCOPE)
    return()
  endif()
  set(${out} "" PARENT_SCOPE)
endfunction()

# True when library `a` may use library `b`.
function(may_use a b out)
  if(a STREQUAL b OR FLOOR_${b} LESS FLOOR_${a})
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Counts and prints a violation when library `user` may not use library `used`.
macro(check_use user used text)
  may_use(${user} ${used} ok)
  if(NOT ok)
    message("layer violation: ${text} (${used}, floor ${FLOOR_${used}})")
    math(EXPR violations "${violations} + 1")
  endif()
endmacro()

set(violations 0)
set(checked 0)
foreach(n IN LISTS names)
  set(dir "${ROOT}/${FOLDER_${n}}")
  if(NOT IS_DIRECTORY "${dir}")
    continue()
  endif()
  # experiments/ holds the libraries' folders side by side; a folder is one library only.
  file(GLOB_RECURSE files LIST_DIRECTORIES false "${dir}/*.h" "${dir}/*.hpp" "${dir}/*.cpp" "${dir}/*.c"
       "${dir}/*.cu" "${dir}/*.cuh")
  foreach(file IN LISTS files)
    math(EXPR checked "${checked} + 1")
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    file(RELATIVE_PATH rel "${ROOT}" "${file}")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
      library_of("${inc}" lib)
      if(lib STREQUAL "")
        continue()
      endif()
      check_use(${n} ${lib} "${rel} (${n}, floor ${FLOOR_${n}}) includes ${inc}")
    endforeach()
  endforeach()
  # The link order: target_link_libraries in the library's own CMakeLists.txt.
  if(EXISTS "${dir}/CMakeLists.txt")
    file(READ "${dir}/CMakeLists.txt" cm)
    string(REGEX MATCHALL "target_link_libraries\\([^)]*\\)" calls "${cm}")
    foreach(call IN LISTS calls)
      string(REGEX REPLACE "[ \t\r\n()]+" ";" words "${call}")
      foreach(w IN LISTS words)
        if(DEFINED TARGET_OF_${w})
          check_use(${n} ${TARGET_OF_${w}} "${FOLDER_${n}}/CMakeLists.txt (${n}) links ${w}")
        endif()
      endforeach()
    endforeach()
  endif()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "check_layers: no source files under ${ROOT} (wrong ROOT?)")
endif()
if(violations GREATER 0)
  message(FATAL_ERROR "check_layers: ${violations} include(s) or link(s) against the layer order (docs/architecture.md \"Layers\")")
endif()
message("check_layers: ${checked} files, every include and link follows the layer order")
