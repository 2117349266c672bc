"""Row estimates from EXPLAIN (FORMAT JSON), on PostgreSQL and on Citus."""

from __future__ import annotations

import json

from crawler.db.estimates import plan_rows

# EXPLAIN (FORMAT JSON) SELECT 1 FROM urls WHERE state = 'new' on a single-node Citus 13.2.2
# cluster with urls distributed on host_id over 32 shards (citus.explain_all_tasks off).
CITUS_PLAN = json.loads(
    '[{"Plan":{"Node Type":"Custom Scan","Custom Plan Provider":"Citus Adaptive",'
    '"Parallel Aware":false,"Async Capable":false,"Startup Cost":0.0,"Total Cost":0.0,'
    '"Plan Rows":100000,"Plan Width":4,"Distributed Query":{"Job":{"Task Count":32,'
    '"Tasks Shown":"One of 32","Tasks":[{"Node":"host=127.0.0.1 port=5499 dbname=crawler",'
    '"Remote Plan":[[{"Plan":{"Node Type":"Seq Scan","Parallel Aware":false,'
    '"Async Capable":false,"Relation Name":"urls_102043","Alias":"urls","Startup Cost":0.0,'
    '"Total Cost":0.0,"Plan Rows":7,"Plan Width":4,"Filter":"(state = \'new\'::text)"}}]]}]}}}}]'
)


def test_a_postgresql_plan_gives_its_top_estimate() -> None:
    assert plan_rows([{"Plan": {"Node Type": "Seq Scan", "Plan Rows": 1234}}]) == 1234


def test_citus_placeholder_is_replaced_by_the_shards_estimates() -> None:
    assert plan_rows(CITUS_PLAN) == 7 * 32  # one shard shown, scaled to the 32


def test_every_shard_shown_is_summed_and_a_nested_job_is_found() -> None:
    job = CITUS_PLAN[0]["Plan"]["Distributed Query"]["Job"]
    tasks = [json.loads(json.dumps(job["Tasks"][0])) for _ in range(4)]
    for n, task in enumerate(tasks):
        task["Remote Plan"][0][0]["Plan"]["Plan Rows"] = 10 * (n + 1)
    scan = {**CITUS_PLAN[0]["Plan"],
            "Distributed Query": {"Job": {"Task Count": 4, "Tasks Shown": "All", "Tasks": tasks}}}
    limited = [{"Plan": {"Node Type": "Limit", "Plan Rows": 100000, "Plans": [scan]}}]
    assert plan_rows(limited) == 10 + 20 + 30 + 40
