"""What `remat plan -s auto` imports (issue 14: start-up time matters): numpy.ma (about
10 ms, pulled in by np.unique) is not needed to load a graph file that names its targets
nor to plan it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_plan_with_auto_does_not_import_numpy_ma(tmp_path: Path) -> None:
    from remat_cli import generators as G
    from remat_cli.loaders import remat_json
    from remat_cli.training import checkmate_training_graph

    g = checkmate_training_graph(G.skip_chain(30, skip=3))
    text = remat_json.dumps(g)
    assert '"targets"' in text
    path = tmp_path / "g.json"
    path.write_text(text)
    code = (
        "import sys\n"
        "from remat_cli.cli import main\n"
        f"sys.argv = ['remat', 'plan', {str(path)!r}, '-s', 'auto', '-b', '0.6x', '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('numpy.ma' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False"
