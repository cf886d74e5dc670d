# The man pages, built from the manual (docs/*.md) by pandoc and installed under man1.
#
# A page of the manual that names itself on its first line, "<!-- man: NAMES - what it
# is -->", becomes one man page per name: docs/README.md is vramfit(1), docs/estimate.md
# vramfit-estimate(1), docs/models.md both vramfit-models(1) and vramfit-inspect(1).
# cmake/man.lua turns the page into one (NAME, SYNOPSIS, the sections, SEE ALSO). Without
# pandoc the pages are skipped with a message, and the build goes on; cli/man then fails,
# as the tests of the other test prerequisites do.
find_program(PANDOC pandoc)
if(NOT PANDOC)
  message(STATUS "pandoc not found: the man pages are not built (make deps, or apt-get install pandoc)")
  return()
endif()

# The date on every page: the last commit's, so that the same sources give the same pages
# (SOURCE_DATE_EPOCH, when set, wins: string(TIMESTAMP) reads it).
if(DEFINED ENV{SOURCE_DATE_EPOCH})
  string(TIMESTAMP VF_MAN_DATE "%Y-%m-%d" UTC)
else()
  execute_process(COMMAND git -C ${CMAKE_SOURCE_DIR} log -1 --format=%cs
                  OUTPUT_VARIABLE VF_MAN_DATE OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE VF_GIT_RC ERROR_QUIET)
  if(NOT VF_GIT_RC EQUAL 0 OR NOT VF_MAN_DATE)
    string(TIMESTAMP VF_MAN_DATE "%Y-%m-%d" UTC)
  endif()
endif()

set(VF_MAN_DIR ${CMAKE_BINARY_DIR}/man)
set(VF_MAN_FILTER ${CMAKE_SOURCE_DIR}/cmake/man.lua)
file(GLOB VF_DOC_PAGES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
set(VF_MAN_PAGES)
foreach(page ${VF_DOC_PAGES})
  # The names are read here: a page whose names change reconfigures.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${page})
  file(STRINGS ${page} line LIMIT_COUNT 1 REGEX "^<!-- man: ")
  if(NOT line)
    continue() # not a page of the manual (docs/ARCHITECTURE.md)
  endif()
  string(REGEX REPLACE "^<!-- man: (.*) - .* -->$" "\\1" names "${line}")
  string(REPLACE ", " ";" names "${names}")
  list(GET names 0 first)
  string(TOUPPER ${first} title)
  set(main ${VF_MAN_DIR}/${first}.1)
  set(outputs ${main})
  set(copies)
  foreach(name ${names})
    if(NOT name STREQUAL first)
      list(APPEND outputs ${VF_MAN_DIR}/${name}.1)
      list(APPEND copies COMMAND ${CMAKE_COMMAND} -E copy ${main} ${VF_MAN_DIR}/${name}.1)
    endif()
  endforeach()
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${VF_MAN_DIR}
    COMMAND ${PANDOC} --from gfm --to man --standalone --lua-filter ${VF_MAN_FILTER}
            -M title=${title} -M section=1 -M "header=vramfit manual"
            -M "footer=vramfit ${PROJECT_VERSION}" -M date=${VF_MAN_DATE}
            -M hyphenate=false -V adjusting=l -o ${main} ${page}
    ${copies}
    DEPENDS ${VF_DOC_PAGES} ${VF_MAN_FILTER} # a link names a page only when that page has a man line
    COMMENT "Man page ${first}.1"
    VERBATIM)
  list(APPEND VF_MAN_PAGES ${outputs})
endforeach()

add_custom_target(man ALL DEPENDS ${VF_MAN_PAGES})
install(FILES ${VF_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
