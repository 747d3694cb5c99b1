#!/usr/bin/env bash
# Make sure a Stockfish binary is reachable the way chess-rl looks for one:
# $STOCKFISH_PATH, then `stockfish` on PATH, then /usr/games/stockfish (Debian's package).
set -euo pipefail
if [[ -n "${STOCKFISH_PATH:-}" ]]; then
  if [[ -x "$STOCKFISH_PATH" ]]; then exit 0; fi
  echo "error: STOCKFISH_PATH=$STOCKFISH_PATH is not an executable file" >&2; exit 1
fi
if command -v stockfish >/dev/null 2>&1 || [[ -x /usr/games/stockfish ]]; then exit 0; fi
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
      echo "error: Stockfish is missing and installing it needs root: run 'sudo apt-get install -y stockfish'," >&2
      echo "       or set STOCKFISH_PATH to a Stockfish binary." >&2; exit 1
    fi
  fi
  echo "Installing Stockfish with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq stockfish >/dev/null
  [[ -x /usr/games/stockfish ]] && { echo "Stockfish installed at /usr/games/stockfish"; exit 0; }
fi
echo "error: Stockfish not found. Install it (Debian/Ubuntu: apt-get install stockfish; macOS: brew install stockfish)" >&2
echo "       or set STOCKFISH_PATH to the binary." >&2
exit 1
