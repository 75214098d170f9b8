# fairlane_readme_examples(README OUT_DIR OUT_VAR): every ```cpp block of
# README becomes a translation unit in OUT_DIR, so the README's examples are
# compiled with the build and cannot drift from the API. The README's text
# stays as people read it:
#  - a block with its own `int main(` is compiled as it stands;
#  - any other block is a fragment: its #include lines go to the top of the
#    file and the rest becomes the body of `int readme_example_N()`, so a
#    fragment may `return 2;` as the README's do.
# Every unit first includes readme_stubs.hpp, which declares the user
# functions the examples call (handle, valid, ship, ...). The list of files
# is set in OUT_VAR. The README is a configure dependency: editing it
# re-runs the extraction.
function(fairlane_readme_examples readme out_dir out_var)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${readme})
  file(READ ${readme} text)
  file(MAKE_DIRECTORY ${out_dir})
  set(files)
  set(n 0)
  while(TRUE)
    string(FIND "${text}" "```cpp\n" start)
    if(start EQUAL -1)
      break()
    endif()
    math(EXPR start "${start} + 7")
    string(SUBSTRING "${text}" ${start} -1 text)
    string(FIND "${text}" "\n```" stop)
    if(stop EQUAL -1)
      message(FATAL_ERROR "${readme}: a ```cpp block is never closed")
    endif()
    string(SUBSTRING "${text}" 0 ${stop} block)
    string(SUBSTRING "${text}" ${stop} -1 text)
    math(EXPR n "${n} + 1")

    # Split off the #include lines (a block's own lines, one per element).
    string(REPLACE ";" "\\;" block "${block}")
    string(REPLACE "\n" ";" lines "${block}")
    set(includes "")
    set(body "")
    foreach(line IN LISTS lines)
      if(line MATCHES "^#include ")
        string(APPEND includes "${line}\n")
      else()
        string(APPEND body "${line}\n")
      endif()
    endforeach()
    set(unit "// Extracted from README.md, block ${n}, by cmake/ReadmeExamples.cmake: do not edit.\n")
    string(APPEND unit "#include \"readme_stubs.hpp\"\n${includes}\n")
    if(body MATCHES "int main\\(")
      string(APPEND unit "${body}")
    else()
      string(APPEND unit "int readme_example_${n}() {\n${body}  return 0;\n}\n")
    endif()
    set(file ${out_dir}/readme_example_${n}.cpp)
    file(CONFIGURE OUTPUT ${file} CONTENT "${unit}" @ONLY)
    list(APPEND files ${file})
  endwhile()
  if(n EQUAL 0)
    message(FATAL_ERROR "${readme}: no ```cpp block found")
  endif()
  set(${out_var} ${files} PARENT_SCOPE)
endfunction()
