#!/usr/bin/env bash
# The man pages (cmake/manpages.cmake: pandoc over docs/*.md into $VF_BUILD_DIR/man): every
# page of the manual was built, each as a man page with NAME and SYNOPSIS, every command of
# `vramfit --help` has its page and appears in vramfit(1)'s synopsis, every option of a
# command's --help is on its page, and `cmake --install` puts them under share/man/man1.
# pandoc is a test prerequisite like the other APT packages: without it this test fails.
NAME=man
source "$(dirname "$0")/lib/harness.sh"
BUILD=${VF_BUILD_DIR:?set VF_BUILD_DIR to the build folder}
MAN=$BUILD/man

if ! command -v pandoc >/dev/null 2>&1; then
  bad "pandoc is missing: the man pages are not built (make deps, or apt-get install pandoc)"
fi

# The pages of the manual and the man pages each names on its first line.
declare -A page_of # man page name -> docs page
for page in "$SRC"/docs/*.md; do
  stem=$(basename "$page" .md)
  line=$(head -n 1 "$page")
  case "$line" in
  "<!-- man: "*) ;;
  *)
    # Only the developers' page stands outside the manual.
    if [ "$stem" = ARCHITECTURE ]; then ok; else bad "docs/$stem.md: no '<!-- man: NAMES - what it is -->' first line"; fi
    continue
    ;;
  esac
  names=$(sed -n 's/^<!-- man: \(.*\) - .* -->$/\1/p' <<<"$line")
  first=${names%%,*}
  want=vramfit-$stem
  [ "$stem" = README ] && want=vramfit
  if [ "$first" = "$want" ]; then ok; else bad "docs/$stem.md names itself '$first', not '$want'"; fi
  for name in ${names//,/ }; do
    page_of[$name]=$page
    roff=$MAN/$name.1
    if [ ! -s "$roff" ]; then
      bad "$name.1 was not built from docs/$stem.md"
      continue
    fi
    # NAME first, "name \- what it is", then SYNOPSIS.
    sections=$(grep '^\.SH ' "$roff" | head -n 2 | tr '\n' ' ')
    if [ "$sections" = '.SH NAME .SH SYNOPSIS ' ]; then ok; else bad "$name.1: sections begin '$sections', want NAME, SYNOPSIS"; fi
    if sed -n '/^\.SH NAME/,/^\.SH SYNOPSIS/p' "$roff" | tr '\n' ' ' | grep -q "$first.* \\\\- [a-z]"; then ok; else bad "$name.1: no 'name \\- what it is' under NAME"; fi
    if grep -q '^\.TH "'"${first^^}"'" "1" "[0-9-]*" "vramfit [0-9.]*"' "$roff"; then ok; else bad "$name.1: no .TH line with section 1, date and version"; fi
    # Read as man-db reads it, where man-db is installed (it need not be): whatis finds the
    # name, and man shows the synopsis.
    if command -v man >/dev/null 2>&1 && command -v lexgrog >/dev/null 2>&1; then
      if lexgrog "$roff" | grep -qF "\"$name - "; then ok; else bad "$name.1: lexgrog does not find '$name - ...': $(lexgrog "$roff")"; fi
      MANWIDTH=80 man -l "$roff" >"$TMP/rendered" 2>/dev/null
      if grep -q '^SYNOPSIS' "$TMP/rendered"; then ok; else bad "$name.1: man -l shows no SYNOPSIS"; fi
    fi
  done
done

# Every command of `vramfit --help` has its page, its options are on it, and vramfit(1)'s
# synopsis lists it.
commands=$("$VRAMFIT" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[ -n "$commands" ] || bad "no commands in 'vramfit --help'"
synopsis=$(sed -n '/^## Synopsis/,/^## /p' "$SRC/docs/README.md")
for cmd in $commands; do
  page=${page_of[vramfit-$cmd]:-}
  if [ -z "$page" ]; then
    bad "vramfit $cmd has no man page (a docs page naming vramfit-$cmd)"
    continue
  fi
  ok
  if grep -q "^    vramfit $cmd " <<<"$synopsis"; then ok; else bad "docs/README.md's synopsis does not list vramfit $cmd"; fi
  # The options of its --help, each on the page that documents it.
  for opt in $("$VRAMFIT" "$cmd" --help | grep -E '^ +--' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
    if grep -qE -- "(^|[^a-z0-9-])$opt([^a-z0-9-]|\$)" "$page"; then ok; else bad "$(basename "$page"): vramfit $cmd's option $opt is not on the page"; fi
  done
done

# cmake --install puts them beside the binary's share/man.
if cmake --install "$BUILD" --prefix "$TMP/prefix" >"$TMP/install.log" 2>&1; then ok; else bad "cmake --install failed: $(tail -3 "$TMP/install.log")"; fi
for name in vramfit vramfit-estimate vramfit-inspect; do
  if [ -s "$TMP/prefix/share/man/man1/$name.1" ]; then ok; else bad "$name.1 not installed under share/man/man1"; fi
done

finish
