"""Locality (pipeline/locality.py, RecordScan.java, Locality.java): with the `hosts` option
every partition of the JVM reader names the host that holds its store (Spark's
preferredLocations, read here from the scan's RDD), and a task never reads a store other
than the one it was planned for: a different store planted at the path between planning and
the tasks is refused in one line. Reads through Python workers (`reader=python`, a store
feature the JVM reader does not read yet) do the same."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline.source import MqfsDataSource  # noqa: E402
from tests.pipeline.helpers import build_store  # noqa: E402
from tests.store.broker_guard_layouts import layout_batch_cq  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("hosts")
    a, b, c = str(base / "broker-a"), str(base / "broker-b"), str(base / "broker-c")
    build_store(a, 1500)
    build_store(b, 700, seed=7)
    build_store(c, 300, seed=9)
    return a, b, c


def scan_rdd(df):
    """The scan's own RDD (DataSourceRDD) of the DataFrame's planned query, partitions planned."""
    rdd = df._jdf.queryExecution().toRdd()
    while "DataSourceRDD" not in rdd.getClass().getSimpleName():
        rdd = rdd.dependencies().head().rdd()
    return rdd


def hosts_of(rdd) -> list[list[str]]:
    """Each partition's preferred locations."""
    return [list(rdd.preferredLocations(p).mkString("\n").split("\n")) if rdd.preferredLocations(p).nonEmpty()
            else [] for p in rdd.partitions()]


def locations(df) -> list[list[str]]:
    return hosts_of(scan_rdd(df))


def test_partitions_name_the_host_of_their_store(spark, stores):
    a, b, c = stores
    read = spark.read.format("mqfs").option("minPartitions", "3")
    alone = {s: len(locations(read.load(s))) for s in stores}
    assert alone[a] >= 3
    got = locations(read.option("hosts", f"{a}=host-a.example,{b}=host-b.example").load([a, b, c]))
    assert len(got) == sum(alone.values())
    assert got == [["host-a.example"]] * alone[a] + [["host-b.example"]] * alone[b] + [[]] * alone[c]
    # a glob of stores, and one host for every store of the read
    glob = os.path.join(os.path.dirname(a), "broker-[ab]")
    assert locations(read.option("hosts", f"{glob}=h1").load([a, b, c])) == (
        [["h1"]] * (alone[a] + alone[b]) + [[]] * alone[c])
    assert locations(read.option("hosts", "h2").load(a)) == [["h2"]] * alone[a]
    # a few queues, read through their units, name their host too
    assert set(map(tuple, locations(read.option("hosts", "h3").option("topic", "Orders").option("queue", "1")
                                    .load(a)))) == {("h3",)}
    assert spark.read.format("mqfs").option("hosts", "h2").load(a).count() == 1500  # Spark runs them anyway


def test_a_hosts_option_that_names_no_store_of_the_read_is_refused(spark, stores):
    with pytest.raises(Exception, match="hosts names '/nowhere', which is none of the read's stores"):
        spark.read.format("mqfs").option("hosts", "/nowhere=h1").load(stores[0]).count()
    with pytest.raises(Exception, match="is not STORE=HOST"):
        spark.read.format("mqfs").option("hosts", f"{stores[0]}=,x=y").load(stores[0]).count()


def test_reads_through_python_workers_name_the_host_of_their_store(spark, stores, tmp_path):
    """reader=python, and a store the JVM reader does not read yet (BatchCQ: read by Python
    workers, said once): their partitions name the host too, and read every row."""
    a, b, c = stores

    def python(**options):
        return spark.read.format("mqfs").options(reader="python", minPartitions="3", **options)

    alone = {s: len(locations(python().load(s))) for s in (a, c)}
    got = locations(python(hosts=f"{a}=host-a.example").load([a, c]))
    assert got == [["host-a.example"]] * alone[a] + [[]] * alone[c]
    # a few queues, read through their units
    few = python(hosts="h3", topic="Orders", queue="1").load(a)
    assert set(map(tuple, locations(few))) == {("h3",)}
    assert python(hosts="h2").load([a, c]).count() == 1800  # Spark runs them anyway
    batch = str(tmp_path / "batch")
    layout_batch_cq(batch)
    read = spark.read.format("mqfs").option("hosts", "h4").load(batch)
    assert set(map(tuple, locations(read))) == {("h4",)}
    assert read.count() == spark.read.format("mqfs").load(batch).count() > 0
    q = (spark.readStream.format("mqfs").options(hosts="h1", reader="python", startingOffsets="earliest")
         .load(c).writeStream.format("memory").queryName("python_hosted")
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert spark.table("python_hosted").count() == 300
    scan = q._jsq.streamingQuery().lastExecution().executedPlan().collectLeaves().head()
    assert set(map(tuple, hosts_of(scan.inputRDD()))) == {("h1",)}


def test_a_stream_names_the_host_of_its_store(spark, stores, tmp_path):
    """A stream's micro-batch partitions, read in the JVM, are planned with the host too: the
    stream runs (local mode has no such host, so Spark runs them here) and reads every row."""
    q = (spark.readStream.format("mqfs").options(hosts="h1", startingOffsets="earliest").load(stores[2])
         .writeStream.format("memory").queryName("hosted").option("checkpointLocation", str(tmp_path / "c"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert spark.table("hosted").count() == 300
    scan = q._jsq.streamingQuery().lastExecution().executedPlan().collectLeaves().head()
    assert set(map(tuple, hosts_of(scan.inputRDD()))) == {("h1",)}


@pytest.mark.parametrize("options", [{}, {"topic": "Orders", "queue": "1"}, {"reader": "python"},
                                     {"reader": "python", "topic": "Orders", "queue": "1"}])
def test_a_task_refuses_a_store_other_than_the_one_planned(spark, tmp_path, options):
    root = str(tmp_path / "store")
    build_store(root, 900, seed=2)
    df = spark.read.format("mqfs").options(**options).load(root)
    rdd = scan_rdd(df)  # planned here, on the driver, against this store
    assert rdd.partitions()
    shutil.move(root, root + ".planned")  # another store at that path, as on another host
    build_store(root, 900, seed=3)
    with pytest.raises(Exception, match="is not the CommitLog file the read was planned with"):
        rdd.count()
    assert spark.read.format("mqfs").options(**options).load(root).count() > 0  # planned again: read


def test_without_the_jar_hosts_is_refused_in_one_line(stores):
    """A session without mqfs-spark.jar reads through Spark's own Python source, whose
    partitions cannot name a host."""
    source = MqfsDataSource({"path": stores[2], "hosts": "h1"})
    with pytest.raises(ValueError, match="the hosts option needs mqfs-spark.jar on Spark's class path"):
        source.reader(source.schema())


def test_a_next_file_made_ahead_is_not_what_a_task_checks_its_store_by(tmp_path):
    """A partition that names no CommitLog range (a queue range's) is checked by its store's
    newest file: that was the next file a broker makes ahead (all zeros; the Java store
    `killed` has one), whose first bytes change when the broker rolls over into it, so a task
    run after the roll-over refused its own store as another one."""
    from pyspark.sql.datasource import InputPartition

    from mqfs.pipeline.locality import checked, opened

    root = str(tmp_path / "s")
    build_store(root, 300)
    files = sorted(os.listdir(os.path.join(root, "commitlog")))
    size = os.path.getsize(os.path.join(root, "commitlog", files[-1]))
    ahead = os.path.join(root, "commitlog", f"{int(files[-1]) + size:020d}")
    with open(ahead, "wb") as f:
        f.write(bytes(size))
    [part] = checked([InputPartition(7)], lambda p: root, {})
    with open(ahead, "r+b") as f:  # the broker's first record in it
        f.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7")
    assert opened(part).value == 7
