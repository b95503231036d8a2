#!/usr/bin/env bash
# System packages strata needs: a Java 17+ runtime for Spark (required) and Graphviz's
# `dot` for `strata graph --out FILE.png|svg` (optional). Installed with apt if missing.
set -euo pipefail

ensure_graphviz() {
  if command -v dot >/dev/null 2>&1; then
    echo "graphviz: found $(dot -V 2>&1)"
  elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    echo "graphviz: installing with apt (for strata graph PNG/SVG output)..."
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; } \
      || echo "warning: could not install graphviz; strata graph can still write .dot files"
  else
    echo "note: graphviz (dot) is not installed; strata graph can write .dot files only." \
         "Install it with: sudo apt-get install graphviz"
  fi
}

java_major() {
  "$1" -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

for candidate in "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then
    major=$(java_major "$candidate")
    if [ "${major:-0}" -ge 17 ]; then
      echo "java: found Java $major at $candidate"
      ensure_graphviz
      exit 0
    fi
  fi
done

echo "java: Java 17 or newer is needed by Spark and was not found; installing OpenJDK 17 with apt..."
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: apt-get is not available. Install a Java 17 runtime yourself (e.g. OpenJDK 17)" >&2
  echo "       and put it on PATH or set JAVA_HOME, then run the command again." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "error: installing Java needs root. Run: sudo apt-get install -y openjdk-17-jre-headless" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
echo "java: installed $(java -version 2>&1 | head -n 1)"
ensure_graphviz
