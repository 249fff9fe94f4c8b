# strata_write_version_header(OUT): writes OUT with STRATA_VERSION (the
# project() version) and STRATA_GIT (`git describe --always` of the source
# tree at configure time, or "no git" outside a git checkout, e.g. a source
# tarball, or when git is missing). configure_file rewrites OUT only when its
# text changes, so a re-configure rebuilds nothing else.
function(strata_write_version_header out)
  set(STRATA_GIT "no git")
  find_package(Git QUIET)
  if(GIT_FOUND AND EXISTS "${CMAKE_SOURCE_DIR}/.git")
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${CMAKE_SOURCE_DIR}" describe --always --tags --abbrev=12
                    OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND NOT describe STREQUAL "")
      set(STRATA_GIT "git ${describe}")
    endif()
  endif()
  set(STRATA_VERSION "${PROJECT_VERSION}")
  configure_file("${CMAKE_SOURCE_DIR}/cmake/strata_version.h.in" "${out}" @ONLY)
endfunction()
