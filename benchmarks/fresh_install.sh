#!/usr/bin/env bash
# First contact: the README's two set-up commands' installs, timed in a fresh clone and a fresh venv.
#
#   bash benchmarks/fresh_install.sh [--dir DIR]     # DIR: an empty or new folder (default: a temp dir)
#
# Clones the repository this script sits in (its committed HEAD, not uncommitted changes) into
# DIR/repo, makes a fresh venv DIR/venv, then times
#   1. the README's first command's install: `pip install -e .` and
#      `rankdyn checkpoints --get minilm smollm2` (checkpoints into DIR/cache), and reports the venv's
#      and the checkpoints' size and any nvidia/cuda/torch/llama package pip installed;
#   2. the test command's install, `pip install -e ".[test]"`, on top, with the venv's size after.
# Packages come from wherever pip is configured to fetch them (PyPI, or a local mirror); the pip
# cache is DIR/pipcache, empty at the start. The run needs the network (or the mirror) and takes
# minutes. Nothing outside DIR is written; DIR is kept (remove it yourself).
set -euo pipefail

DIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="${2:?--dir needs a folder}"; shift 2 ;;
    --dir=*) DIR="${1#--dir=}"; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (usage: bash benchmarks/fresh_install.sh [--dir DIR])" >&2; exit 2 ;;
  esac
done
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "$DIR" ]; then
  DIR="$(mktemp -d "${TMPDIR:-/tmp}/rankdyn-fresh.XXXXXX")"
elif [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
  echo "$DIR is not empty: give a new or empty folder" >&2
  exit 2
fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
echo "repository $REPO, working in $DIR"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //') ($(nproc) cores), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

git clone -q "$REPO" "$DIR/repo"
cd "$DIR/repo"
python3 -m venv "$DIR/venv"
# shellcheck disable=SC1091
. "$DIR/venv/bin/activate"
export RANKDYN_CHECKPOINTS="$DIR/cache" PIP_CACHE_DIR="$DIR/pipcache"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

s=$(now)
python3 -m pip install -q -e . && rankdyn checkpoints --get minilm smollm2 > "$DIR/get.log" 2>&1
e=$(now)
echo "first command (install + get): $(secs "$s" "$e") s"
du -sh "$DIR/venv" "$DIR/cache"
python3 -m pip list 2>/dev/null | grep -i -E "nvidia|cuda|torch|llama" || echo "no nvidia/cuda/torch/llama packages"

s=$(now)
python3 -m pip install -q -e ".[test]"
e=$(now)
echo "second command's install: $(secs "$s" "$e") s"
du -sh "$DIR/venv"
python3 -m pip list 2>/dev/null | grep -i -E "nvidia|cuda|llama" || echo "no nvidia/cuda/llama packages"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
