"""The reachability mesh's analysis: which node, rank or pair (and which direction) fails.

Rows are shaped as ``ddpdoctor/check/mesh.py:run_mesh`` returns them; the mechanism itself
is exercised for real by the check's end-to-end tests (tests/functional/test_check_mesh_e2e.py).
"""

from ddpdoctor.check.analysis.reachability import analyze


def _rows(n, nodes, fail=()):
    """``n`` ranks on ``nodes`` (rank -> host); ``fail``: directed (i, j) that fail."""
    rows = {}
    for i in range(n):
        failed = {str(j): "TimeoutError: timed out" for j in range(n) if (i, j) in fail}
        rows[i] = {"address": f"10.0.0.{i + 1}:4000{i}", "node": nodes[i], "tried": n - 1,
                   "failed": failed, "slowest_ms": 0.4, "unpublished": []}
    return rows


def _ids(findings):
    return [(f.id, f.ranks) for f in findings]


ONE_NODE = {r: "a" for r in range(4)}
TWO_NODES = {0: "a", 1: "a", 2: "b", 3: "b"}
FOUR_NODES = {r: f"n{r}" for r in range(4)}


def test_every_connection_works():
    check, findings = analyze(_rows(4, TWO_NODES), 4)
    assert findings == []
    assert check.summary.startswith("12/12 directed connections ok between 4 ranks on "
                                    "2 node(s) (intra-node 4/4, inter-node 8/8), one round")


def test_a_pair_blocked_both_ways_is_that_pair():
    check, findings = analyze(_rows(4, FOUR_NODES, {(1, 3), (3, 1)}), 4)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [1, 3])]
    assert "both directions" in findings[0].title
    assert findings[0].evidence["tier"] == "inter-node"
    assert check.summary.startswith("10/12")


def test_a_one_way_block_names_its_direction():
    _, findings = analyze(_rows(4, ONE_NODE, {(2, 0)}), 4)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [0, 2])]
    assert findings[0].evidence["direction"] == "2->0"
    assert findings[0].evidence["tier"] == "intra-node"
    assert "rank 2 cannot connect to rank 0" in findings[0].title


def test_a_rank_nobody_reaches_is_that_rank():
    fail = {(i, 2) for i in (0, 1, 3)}
    _, findings = analyze(_rows(4, FOUR_NODES, fail), 4)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [2])]
    assert "cannot be reached from any other rank" in findings[0].title


def test_a_node_cut_off_from_the_others_is_that_node():
    nodes = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    fail = {(i, j) for i in range(6) for j in range(6)
            if i != j and (nodes[i] == "c") != (nodes[j] == "c")}
    _, findings = analyze(_rows(6, nodes, fail), 6)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [4, 5])]
    assert findings[0].evidence["node"] == "c"


def test_two_nodes_that_cannot_reach_each_other_are_the_link_between_them():
    fail = {(i, j) for i in range(4) for j in range(4) if TWO_NODES[i] != TWO_NODES[j]}
    _, findings = analyze(_rows(4, TWO_NODES, fail), 4)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [0, 1, 2, 3])]
    assert "nodes a and b cannot reach each other" in findings[0].title


def test_two_ranks_blocked_is_the_pair_not_a_rank():
    _, findings = analyze(_rows(2, {0: "a", 1: "b"}, {(0, 1), (1, 0)}), 2)
    # two nodes, every cross connection fails: the link between the nodes
    assert _ids(findings) == [("COMM_CONNECTIVITY", [0, 1])]


def test_a_listener_that_is_not_the_peer_fails_that_connection():
    rows = _rows(3, {r: "a" for r in range(3)})
    rows[0]["failed"]["1"] = "the listener at 10.0.0.2:40001 is not rank 1: b'x'"
    _, findings = analyze(rows, 3)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [0, 1])]
    assert findings[0].evidence["direction"] == "0->1"


def test_one_rank_or_no_rows_is_skipped_not_ok():
    check, findings = analyze({0: {"skipped": "one rank"}}, 1)
    assert (check.status, findings) == ("skipped", [])
    assert check.summary == "skipped: one rank"


def test_ranks_that_sent_no_row_are_left_to_the_launch_analysis():
    rows = _rows(3, {r: "a" for r in range(3)}, {(0, 2), (1, 2)})
    del rows[2]
    rows[0]["unpublished"] = [2]
    rows[1]["unpublished"] = [2]
    check, findings = analyze(rows, 3)
    assert findings == []
    assert "rank(s) 2 never published an address" in check.summary


def test_a_rank_whose_address_one_peer_never_got_is_not_counted_against_it():
    rows = _rows(3, {r: "a" for r in range(3)})
    rows[0]["unpublished"] = [2]  # rank 0 never received rank 2's address
    rows[0]["tried"] = 1
    check, findings = analyze(rows, 3)
    assert findings == []
    assert check.summary.startswith("5/5 directed connections ok")


def test_a_4096_rank_mesh_with_one_blocked_pair_is_that_pair():
    # Rows carry only failures: the analysis is linear in ranks + failures (the pytest
    # timeout would stop a quadratic one).
    nodes = {r: f"n{r // 8}" for r in range(4096)}
    rows = _rows(64, {r: nodes[r] for r in range(64)})
    big = {r: {**rows[r % 64], "node": nodes[r], "tried": 4095, "failed": {}}
           for r in range(4096)}
    big[3]["failed"] = {"2050": "TimeoutError: timed out"}
    big[2050]["failed"] = {"3": "TimeoutError: timed out"}
    check, findings = analyze(big, 4096)
    assert [(f.id, f.ranks) for f in findings] == [("COMM_CONNECTIVITY", [3, 2050])]
    assert check.summary.startswith(f"{4096 * 4095 - 2}/{4096 * 4095} directed")
