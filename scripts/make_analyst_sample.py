"""Write the bundled analyst sample tasks (invented for the project, real-looking tables).

    python scripts/make_analyst_sample.py engine/benchmarks/analyst/sample_tasks

Deterministic (seeded). Every number in a reference report is computed from the task's own
CSV files, so a report grounded in the sources can reach every claim the reference makes.
Three tasks: two yearly variants of a city traffic-safety report (each is the other's template,
R*), and a state unemployment brief (an XLSX source) with a hand-written checklist (the other two have none, so
the checklist-creation path runs).
"""

from __future__ import annotations

import csv
import json
import random
import sys
from pathlib import Path

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
DISTRICTS = ["Downtown", "Northside", "Eastgate", "Riverside", "Westfield"]


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def write_xlsx(path: Path, header: list[str], rows: list[list[object]]) -> None:
    """An XLSX source (the paper's tasks mix .md, .csv and .xlsx). The cells are deterministic;
    the file's bytes are not (the zip container stamps times)."""
    import datetime as dt

    import openpyxl

    path.parent.mkdir(parents=True, exist_ok=True)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "rates"
    ws.append(header)
    for r in rows:
        ws.append(r)
    wb.properties.created = wb.properties.modified = dt.datetime(2025, 1, 1)
    wb.save(path)


def crash_task(root: Path, year: int, other: int, seed: int) -> None:
    rng = random.Random(seed)
    d = root / f"crashes-{year}"
    rows = []
    for m in MONTHS:
        for dist in DISTRICTS:
            total = rng.randint(18, 70)
            injury = rng.randint(3, total // 3)
            fatal = rng.choice([0, 0, 0, 1, 1, 2])
            ped = rng.randint(0, 6)
            rows.append([year, m, dist, total, injury, fatal, ped])
    write_csv(d / "sources" / f"crashes_{year}.csv",
              ["year", "month", "district", "crashes", "injury_crashes", "fatal_crashes", "pedestrian_crashes"], rows)
    total = sum(r[3] for r in rows)
    fatal = sum(r[5] for r in rows)
    injury = sum(r[4] for r in rows)
    by_dist = {k: sum(r[3] for r in rows if r[2] == k) for k in DISTRICTS}
    by_month = {m: sum(r[3] for r in rows if r[1] == m) for m in MONTHS}
    worst_d = max(by_dist, key=by_dist.get)
    worst_m = max(by_month, key=by_month.get)
    ped = sum(r[6] for r in rows)
    (d / "sources" / "vision_zero_update.md").parent.mkdir(parents=True, exist_ok=True)
    (d / "sources" / "vision_zero_update.md").write_text(
        f"# Vision Zero program update ({year})\n\n"
        f"The Department of Public Works installed {rng.randint(8, 20)} new leading pedestrian intervals and "
        f"{rng.randint(3, 9)} speed cushions in {year}. The program's goal remains zero traffic deaths by 2035.\n\n"
        f"Enforcement: the police department issued {rng.randint(4000, 9000):,} speeding citations in {year}.\n\n"
        "Crash data are reported by district and month; a crash is counted once, by its most severe outcome "
        "category for the fatal and injury columns.\n")
    (d / "sources" / "council_minutes_excerpt.md").write_text(
        f"# City Council transportation committee, minutes excerpt ({year})\n\n"
        "Members discussed the parking meter contract and the library renovation schedule. "
        "No votes on traffic safety were taken at this meeting.\n")   # a distractor source
    dist_rows = "\n".join(f"| {k} | {v} | {100 * v / total:.1f}% |" for k, v in sorted(by_dist.items(), key=lambda x: -x[1]))
    (d / "reference.md").write_text(
        f"# Traffic Safety Report {year}\n\n"
        "## Summary\n\n"
        f"The city recorded {total:,} crashes in {year}, of which {injury:,} involved an injury and {fatal} were fatal. "
        f"Pedestrians were involved in {ped} crashes. {worst_d} had the most crashes ({by_dist[worst_d]}), and "
        f"{worst_m} was the month with the most crashes ({by_month[worst_m]}).\n\n"
        "## Crashes by district\n\n| District | Crashes | Share |\n|---|---|---|\n" + dist_rows + "\n\n"
        "## Monthly trend\n\n"
        f"![Crashes per month in {year}](figures/monthly_{year}.png)\n\n"
        f"Figure 1: Crashes per month in {year}, all districts.\n\n"
        "## Severity\n\n"
        f"Injury crashes were {100 * injury / total:.1f}% of all crashes. Fatal crashes numbered {fatal}.\n\n"
        f"![Fatal and injury crashes by district, {year}](figures/severity_{year}.png)\n\n"
        "## About this report\n\nPrepared by the Office of Transportation Analytics.\n")
    (d / "toc.md").write_text("1. Summary (total, injury and fatal crashes; worst district and month)\n"
                              "2. Crashes by district (table: district, crashes, share)\n"
                              "3. Monthly trend (line chart of crashes per month)\n"
                              "4. Severity (injury share; bar chart of fatal and injury crashes by district)\n")
    (d / "excluded.md").write_text("- \"Prepared by the Office of Transportation Analytics\" (authorship, not derivable from the sources)\n")
    (d / "task.json").write_text(json.dumps({
        "task_id": f"crashes-{year}", "family": "crashes", "variant": str(year), "domain": "Public & Government Policies",
        "instruction": (f"Write the city's annual traffic safety report for {year} from the provided crash data and "
                        "program documents: summarise totals and severity, compare districts in a table, show the "
                        "monthly trend in a chart, and note the severity mix by district."),
        "template_from": f"crashes-{other}"}, indent=2) + "\n")


def unemployment_task(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    d = root / "unemployment-brief"
    states = ["Ohio", "Michigan", "Indiana", "Pennsylvania", "Illinois", "Wisconsin"]
    rows = []
    for s in states:
        base = rng.uniform(3.2, 5.2)
        for y in range(2019, 2025):
            shock = 4.5 if y == 2020 else (1.2 if y == 2021 else 0.0)
            rows.append([s, y, round(base + shock + rng.uniform(-0.4, 0.4), 1)])
    write_xlsx(d / "sources" / "unemployment_rates.xlsx", ["state", "year", "unemployment_rate"], rows)
    r2024 = {s: r[2] for s in states for r in rows if r[0] == s and r[1] == 2024}
    r2020 = {s: r[2] for s in states for r in rows if r[0] == s and r[1] == 2020}
    lo, hi = min(r2024, key=r2024.get), max(r2024, key=r2024.get)
    mean24 = sum(r2024.values()) / len(states)
    (d / "sources" / "methodology.md").parent.mkdir(parents=True, exist_ok=True)
    (d / "sources" / "methodology.md").write_text(
        "# Notes on the data\n\nAnnual averages of monthly, seasonally adjusted unemployment rates (percent of the "
        "labor force), Local Area Unemployment Statistics.\n")
    table = "\n".join(f"| {s} | {r2020[s]:.1f} | {r2024[s]:.1f} | {r2024[s] - r2020[s]:+.1f} |" for s in states)
    (d / "reference.md").write_text(
        "# Great Lakes Labor Market Brief, 2019-2024\n\n## Key findings\n\n"
        f"- In 2024 the lowest unemployment rate was in {lo} ({r2024[lo]:.1f}%) and the highest in {hi} ({r2024[hi]:.1f}%).\n"
        f"- The average 2024 rate across the six states was {mean24:.1f}%.\n"
        "- Every state's rate peaked in 2020.\n\n"
        "## Rates by state\n\n| State | 2020 | 2024 | Change |\n|---|---|---|---|\n" + table + "\n\n"
        "![Unemployment rate by state, 2019-2024](figures/rates.png)\n\n"
        "## Method\n\nAnnual averages of seasonally adjusted monthly rates.\n")
    criteria = [
        ("include the sections Key findings, Rates by state and Method", "all three", "none"),
        (f"state that {lo} had the lowest 2024 unemployment rate, {r2024[lo]:.1f}%", "name and value", "neither"),
        (f"state that {hi} had the highest 2024 unemployment rate, {r2024[hi]:.1f}%", "name and value", "neither"),
        (f"give the six-state average 2024 rate as {mean24:.1f}%", "exact value", "absent"),
        ("present a 4-column table with headers State, 2020, 2024, Change for all six states", "exact table", "no table"),
        ("include a line chart of unemployment rate by state over 2019-2024 with labelled axes", "complete chart", "no chart"),
        ("note that rates peaked in 2020 in every state", "stated for all", "absent"),
        ("describe the data as annual averages of seasonally adjusted monthly rates", "stated", "absent"),
    ]
    checklist = [f"The response should {c}.\n- 1: {bad}\n- 2: mostly missing\n- 3: partly present\n- 4: nearly complete\n- 5: {good}"
                 for c, good, bad in criteria]
    (d / "checklist.json").write_text(json.dumps(checklist, indent=2) + "\n")
    (d / "task.json").write_text(json.dumps({
        "task_id": "unemployment-brief", "family": "unemployment", "variant": "2019-2024",
        "domain": "Statistical & Data Analysis",
        "instruction": ("Write a short labor market brief for six Great Lakes states from the provided unemployment "
                        "data (2019-2024): key findings, a table of 2020 and 2024 rates with the change, a chart of "
                        "the rates over time, and a note on the data.")}, indent=2) + "\n")


def main(out: str) -> None:
    root = Path(out)
    crash_task(root, 2023, 2022, seed=23)
    crash_task(root, 2022, 2023, seed=22)
    unemployment_task(root, seed=7)
    print(f"3 tasks -> {root}")


if __name__ == "__main__":
    main(sys.argv[1])
