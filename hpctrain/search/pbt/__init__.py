"""Population-based training (search.method pbt): `parallel` members, each a run of the job's
shape, train at once; every interval each records its score and checkpoint in the study's
workspace (lineage.py), and one in the bottom fraction copies a top member's newest checkpoint
and continues from it with explored values (explore.py, member.py). show.py follows it
(status, plot, the Python best member), cost.py reports it (report, list)."""
