#!/usr/bin/env bash
# The README's pictures, made by the project's own commands (`make images`): seed 000's CNN job
# and its `tensortap report`, seed 002's trial and its `tensortap tensorplot`, each page
# photographed by headless Chromium (Debian's chromium package); then the dashboard's pictures
# (make_dashboard_images.py: the runs table, a run's page, the compare view).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
WORK=build/images
rm -rf "$WORK" && mkdir -p "$WORK"
"$PY" examples/seed000_builtin_rules.py --output "$WORK/runs"
"$PY" examples/seed002_tensorplot.py --output "$WORK/seed002"
"$PY" -m tensortap.cli report "$WORK"/runs/seed000-* -o "$WORK/report.html"
"$PY" -m tensortap.cli tensorplot "$WORK/seed002" --title "ReLU outputs" \
    --label '^Sequential_input_0$' --prediction '^Sequential_output_0$' -o "$WORK/tensorplot.html"
shoot() {  # page, size, picture
    chromium --headless=new --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
        --use-angle=swiftshader --enable-unsafe-swiftshader --user-data-dir="$WORK/chromium" \
        --window-size="$2" --virtual-time-budget=8000 --screenshot="$3" \
        "$1" 2>/dev/null
}
shoot "file://$PWD/$WORK/report.html" 1200,1850 docs/images/report.png
shoot "file://$PWD/$WORK/tensorplot.html" 1200,760 docs/images/tensorplot.png

echo "wrote docs/images/report.png and tensorplot.png"
"$PY" docs/images/make_dashboard_images.py
