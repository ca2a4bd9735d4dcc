/*
 * Writes a store with RocketMQ 5's own DefaultMessageStore, turning on what a broker can turn on,
 * and prints what the store's getMessage (and queryMessage) answered, as JSON, so tests can
 * compare mqfs's reading of the files with the broker's own. Built by scripts/java-broker-store.
 *
 * Usage: BrokerStoreWriter <storeDir> <clean|killed|writable|rocksdb|rocksdb-killed|dledger|dledger-killed|read|resume> <answers.json>
 *   clean: the broker shuts down cleanly (no abort file);
 *   killed: the JVM halts after dispatch, as after a kill -9 (abort file left, checkpoint stale);
 *   writable: as clean, without the features mqfs refuses to write beside (LMQ, BatchCQ);
 *   rocksdb: as writable, by RocksDBMessageStore (storeType=defaultRocksDB: the ConsumeQueue is a
 *     RocksDB database in consumequeue/), with the topics in RocksDB (config/topics/) and a
 *     topics.json that lacks some of them, as a broker's old export;
 *   rocksdb-killed: as rocksdb, the broker having deleted its oldest CommitLog file, then halted;
 *   dledger, dledger-killed: as writable and as killed, the CommitLog on DLedger
 *     (enableDLegerCommitLog, a one-node Raft group that elects itself);
 *   read: writes nothing: loads the store as a restarting broker does and answers for every
 *     queue on disk (what the broker makes of a store mqfs wrote to);
 *   resume: as read, after putting one message to Orders/0 (a broker going on after its recovery).
 * What the broker itself does before the store (delay and timer topics, transaction half and op
 * topics, inner batches, the producer's compression) is done here the way the broker's and the
 * client's code do it, since only the store module is compiled.
 */

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.BoundaryType;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicAttributes;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.attribute.CQType;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.config.ConfigRocksDBStorage;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.RocksDBMessageStore;
import org.apache.rocketmq.store.StoreType;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerMetrics;

public final class BrokerStoreWriter {
    static final InetSocketAddress STORE_HOST = new InetSocketAddress("127.0.0.1", 10911);
    static final InetSocketAddress BORN_HOST = new InetSocketAddress("127.0.0.1", 50000);
    static final String BATCHED = "Batched";
    static final long BORN = 1_790_000_000_000L;

    private final DefaultMessageStore store;
    private final Map<String, Integer> queues = new TreeMap<>();
    private final List<String> keys = new ArrayList<>();
    private int seq;

    private final boolean refusedFeatures;
    private boolean collectKeys;

    private BrokerStoreWriter(DefaultMessageStore store, boolean refusedFeatures) {
        this.store = store;
        this.refusedFeatures = refusedFeatures;
    }

    /** Every queue of consumequeue/ and batchconsumequeue/, to answer for. */
    void queuesOnDisk(String root) {
        for (String kind : new String[] {"consumequeue", "batchconsumequeue"}) {
            File[] topicDirs = new File(root, kind).listFiles();
            for (File t : topicDirs == null ? new File[0] : topicDirs) {
                File[] queueDirs = t.listFiles();
                for (File q : queueDirs == null ? new File[0] : queueDirs) {
                    queues.put(t.getName() + "\u0000" + Integer.parseInt(q.getName()), 1);
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String root = args[0];
        String mode = args[1];
        boolean refusedFeatures = "clean".equals(mode) || "killed".equals(mode);
        boolean rocks = mode.startsWith("rocksdb");
        boolean dledger = mode.startsWith("dledger");
        MessageStoreConfig cfg = new MessageStoreConfig();
        if (rocks) {
            cfg.setStoreType(StoreType.DEFAULT_ROCKSDB.getStoreType());
        }
        cfg.setStorePathRootDir(root);
        cfg.setStorePathCommitLog(root + File.separator + "commitlog");
        cfg.setMappedFileSizeCommitLog(rocks ? 32 * 1024 : 64 * 1024);  // rocksdb-killed deletes the oldest of four
        cfg.setMappedFileSizeConsumeQueue(64 * 20);
        cfg.setMapperFileSizeBatchConsumeQueue(16 * 46);
        cfg.setMaxHashSlotNum(64);
        cfg.setMaxIndexNum(256);
        cfg.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        cfg.setHaListenPort(0);
        cfg.setEnableLmq(true);
        cfg.setEnableMultiDispatch(true);
        cfg.setTimerWheelEnable(true);
        cfg.setTimerPrecisionMs(100);
        cfg.setTimerMaxDelaySec(60);
        cfg.setMappedFileSizeTimerLog(64 * 1024);
        cfg.setMessageDelayLevel("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h");
        if (dledger || new File(root, "dledger-n0").isDirectory()) {
            cfg.setEnableDLegerCommitLog(true);
            cfg.setdLegerGroup("mqfs");
            cfg.setdLegerSelfId("n0");
            try (java.net.ServerSocket free = new java.net.ServerSocket(0)) {
                cfg.setdLegerPeers("n0-127.0.0.1:" + free.getLocalPort());
            }
        }

        ConcurrentMap<String, TopicConfig> topics = new ConcurrentHashMap<>();
        TopicConfig batched = new TopicConfig(BATCHED, 1, 1);
        Map<String, String> attributes = new HashMap<>();
        attributes.put(TopicAttributes.QUEUE_TYPE_ATTRIBUTE.getName(), CQType.BatchCQ.toString());
        batched.setAttributes(attributes);
        if (refusedFeatures || new File(root, "batchconsumequeue" + File.separator + BATCHED).isDirectory()) {
            topics.put(BATCHED, batched);  // what the broker's topics.json says, before it loads the store
        }

        BrokerStatsManager stats = new BrokerStatsManager("mqfs", true);
        DefaultMessageStore store = rocks
            ? new RocksDBMessageStore(cfg, stats, (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
                new BrokerConfig(), topics)
            : new DefaultMessageStore(cfg, stats, (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
                new BrokerConfig(), topics);
        TimerCheckpoint timerCheckpoint = new TimerCheckpoint(root + File.separator + "config" + File.separator + "timercheck");
        TimerMetrics timerMetrics = new TimerMetrics(root + File.separator + "config" + File.separator + "timermetrics");
        TimerMessageStore timer = new TimerMessageStore(store, cfg, timerCheckpoint, timerMetrics, null);
        store.setTimerMessageStore(timer);
        check(store.load(), "load");
        check(timer.load(), "timer load");
        store.start();
        if (cfg.isEnableDLegerCommitLog()) {  // puts need the group's leader: a group of one elects itself
            long deadline = System.currentTimeMillis() + 30_000;
            while (!((DLedgerCommitLog) store.getCommitLog()).getdLedgerServer().getMemberState().isLeader()) {
                check(System.currentTimeMillis() < deadline, "DLedger leader");
                Thread.sleep(20);
            }
        }
        timer.start(true);

        BrokerStoreWriter w = new BrokerStoreWriter(store, refusedFeatures);
        try {
            if ("read".equals(mode)) {
                w.queuesOnDisk(root);
            } else if ("resume".equals(mode)) {
                w.queuesOnDisk(root);
                w.put(w.message("Orders", 0, "after recovery".getBytes(StandardCharsets.UTF_8), "R", "resumed"));
            } else {
                w.write();
                if (rocks) {
                    w.writeRocksDBTopics(root, topics);
                }
                writeTopicsJson(root, topics);
            }
            w.waitDispatched();
            if ("rocksdb-killed".equals(mode)) {
                // CleanCommitLogService's delete at its time, one file a run (deleteCommitLogFilesInterval)
                check(store.getCommitLog().deleteExpiredFile(0, 0, 0, true, 1) == 1, "delete the oldest CommitLog file");
            }
            try (Writer out = new OutputStreamWriter(new FileOutputStream(args[2]), StandardCharsets.UTF_8)) {
                out.write(w.answers());
            }
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
        if (mode.endsWith("killed")) {
            Runtime.getRuntime().halt(0);
        }
        timer.shutdown();
        store.shutdown();
        System.exit(0);
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what + " failed");
        }
    }

    /** What every broker puts: a message with tags, keys, a uniq id, hosts and times. */
    MessageExtBrokerInner message(String topic, int queueId, byte[] body, String tags, String keys) {
        MessageExtBrokerInner m = new MessageExtBrokerInner();
        m.setTopic(topic);
        m.setQueueId(queueId);
        m.setBody(body);
        if (tags != null) {
            m.setTags(tags);
        }
        if (keys != null) {
            m.setKeys(keys);
            for (String k : keys.split(MessageConst.KEY_SEPARATOR)) {
                this.keys.add(topic + "\u0000" + k);
            }
        }
        MessageClientIDSetter.setUniqID(m);
        m.setBornTimestamp(BORN + seq++);
        m.setBornHost(BORN_HOST);
        m.setStoreHost(STORE_HOST);
        return m;
    }

    PutMessageResult put(MessageExtBrokerInner m) {
        m.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
        m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(m.getTags()));
        PutMessageResult r = store.putMessage(m);
        check(r.isOk(), "put " + m.getTopic() + ": " + r.getPutMessageStatus());
        queues.put(m.getTopic() + "\u0000" + m.getQueueId(), 1);
        return r;
    }

    /** DefaultMQProducerImpl.tryToCompressMessage: bodies over 4 KiB, with the type's flag. */
    static byte[] compress(MessageExtBrokerInner m, byte[] body, CompressionType type) throws Exception {
        m.setSysFlag(m.getSysFlag() | MessageSysFlag.COMPRESSED_FLAG | type.getCompressionFlag());
        return CompressorFactory.getCompressor(type).compress(body, 5);
    }

    static byte[] bigBody(int i) {
        StringBuilder b = new StringBuilder("[");
        while (b.length() < 9000) {
            b.append("{\"order\": ").append(i).append(", \"note\": \"needle-").append(i).append("\"},");
        }
        return b.append("{}]").toString().getBytes(StandardCharsets.UTF_8);
    }

    void write() throws Exception {
        // Plain topics over several queues, tags, keys, unicode user properties; rolls the CommitLog.
        for (int i = 0; i < 120; i++) {
            MessageExtBrokerInner m = message("Orders", i % 3, ("order " + i + " ünïcødé ✓").getBytes(StandardCharsets.UTF_8),
                "T" + (i % 4), "k" + i + " both" + (i % 5));
            m.putUserProperty("region", "eu-west-" + (i % 2) + "-é");
            m.putUserProperty("ключ", "значение " + i);
            put(m);
        }
        for (int i = 0; i < 40; i++) {
            put(message("Events", i % 2, new byte[500 + i], i % 2 == 0 ? "A||B" : null, null));
        }
        // Bodies compressed as the producer sends them, one queue per compression type.
        CompressionType[] types = {CompressionType.LZ4, CompressionType.ZSTD, CompressionType.ZLIB};
        for (int q = 0; q < types.length; q++) {
            for (int i = 0; i < 3; i++) {
                MessageExtBrokerInner m = message("Packed", q, null, "P" + q, "packed-" + q + "-" + i);
                m.setBody(i == 1 ? ("small " + i).getBytes(StandardCharsets.UTF_8) : compress(m, bigBody(i), types[q]));
                put(m);
            }
        }
        // Delayed messages: HookUtils.transformDelayLevelMessage.
        for (int i = 0; i < 4; i++) {
            MessageExtBrokerInner m = message("Later", 0, ("delayed " + i).getBytes(StandardCharsets.UTF_8), "D", "later-" + i);
            m.setDelayTimeLevel(3 + i % 2);
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, m.getTopic());
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(m.getQueueId()));
            m.setTopic(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC);
            m.setQueueId(m.getDelayTimeLevel() - 1);
            put(m);
        }
        // Transactions: half messages (TransactionalMessageBridge.parseHalfMessageInner), their op
        // messages, one committed to its real topic (EndTransactionProcessor) and one prepared
        // record as a 4.x client's broker stored it (no ConsumeQueue unit).
        List<Long> halfOffsets = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            MessageExtBrokerInner m = message("Payments", 0, ("half " + i).getBytes(StandardCharsets.UTF_8), "H", "pay-" + i);
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
            MessageAccessor.putProperty(m, "__transactionId__", MessageClientIDSetter.getUniqID(m));
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, m.getTopic());
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, "0");
            m.setSysFlag(MessageSysFlag.resetTransactionValue(m.getSysFlag(), MessageSysFlag.TRANSACTION_NOT_TYPE));
            m.setTopic(TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC);
            m.setQueueId(0);
            halfOffsets.add(put(m).getAppendMessageResult().getLogicsOffset());
        }
        for (long off : halfOffsets.subList(0, 2)) {
            MessageExtBrokerInner op = message(TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC, 0,
                String.valueOf(off).getBytes(StandardCharsets.UTF_8), "d", null);
            put(op);
        }
        MessageExtBrokerInner commit = message("Payments", 0, "committed 0".getBytes(StandardCharsets.UTF_8), "H", "pay-commit");
        commit.setSysFlag(MessageSysFlag.resetTransactionValue(0, MessageSysFlag.TRANSACTION_COMMIT_TYPE));
        put(commit);
        MessageExtBrokerInner prepared = message("Payments", 0, "prepared".getBytes(StandardCharsets.UTF_8), "H", "pay-prepared");
        prepared.setSysFlag(MessageSysFlag.TRANSACTION_PREPARED_TYPE);
        put(prepared);
        queues.put("Payments\u00000", 1);
        // A batch (MessageExtBatch, as putMessages gets it from SendMessageProcessor).
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            Message m = new Message("Bulk", "B" + i, "bulk-" + i, ("bulk " + i).getBytes(StandardCharsets.UTF_8));
            MessageClientIDSetter.setUniqID(m);
            batch.add(m);
            keys.add("Bulk\u0000bulk-" + i);
        }
        MessageExtBatch mb = new MessageExtBatch();
        mb.setTopic("Bulk");
        mb.setQueueId(1);
        mb.setBody(MessageDecoder.encodeMessages(batch));
        mb.setBornTimestamp(BORN + seq++);
        mb.setBornHost(BORN_HOST);
        mb.setStoreHost(STORE_HOST);
        MessageAccessor.putProperty(mb, MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
        mb.setPropertiesString(MessageDecoder.messageProperties2String(mb.getProperties()));
        check(store.putMessages(mb).isOk(), "putMessages");
        queues.put("Bulk\u00001", 1);
        // LMQ / multi-dispatch: one record, units in its topic's queue and in each LMQ queue.
        for (int i = 0; i < (refusedFeatures ? 6 : 0); i++) {
            MessageExtBrokerInner m = message("Chat", 0, ("lmq " + i).getBytes(StandardCharsets.UTF_8), "L", "chat-" + i);
            String lmqs = i % 2 == 0 ? "%LMQ%room1,%LMQ%room2" : "%LMQ%room2";
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_INNER_MULTI_DISPATCH, lmqs);
            put(m);
            for (String q : lmqs.split(MixAll.LMQ_DISPATCH_SEPARATOR)) {
                queues.put(q + "\u0000" + MixAll.LMQ_QUEUE_ID, 1);
            }
        }
        // BatchCQ topic: plain records and inner batches (SendMessageProcessor with a uniq id).
        for (int i = 0; i < (refusedFeatures ? 3 : 0); i++) {
            put(message(BATCHED, 0, ("single " + i).getBytes(StandardCharsets.UTF_8), "S", "single-" + i));
            List<Message> inner = new ArrayList<>();
            for (int j = 0; j < 4; j++) {
                Message m = new Message(BATCHED, "I" + j, "inner-" + i + "-" + j, ("inner " + i + "." + j).getBytes(StandardCharsets.UTF_8));
                MessageClientIDSetter.setUniqID(m);
                inner.add(m);
            }
            MessageExtBatch ib = new MessageExtBatch();
            ib.setTopic(BATCHED);
            ib.setQueueId(0);
            ib.setBody(MessageDecoder.encodeMessages(inner));
            ib.setBornTimestamp(BORN + seq++);
            ib.setBornHost(BORN_HOST);
            ib.setStoreHost(STORE_HOST);
            MessageClientIDSetter.setUniqID(ib);
            keys.add(BATCHED + "\u0000" + MessageClientIDSetter.getUniqID(ib));
            ib.setSysFlag(ib.getSysFlag() | MessageSysFlag.NEED_UNWRAP_FLAG | MessageSysFlag.INNER_BATCH_FLAG);
            ib.setInnerBatch(true);
            MessageAccessor.putProperty(ib, MessageConst.PROPERTY_INNER_NUM, String.valueOf(inner.size()));
            ib.setPropertiesString(MessageDecoder.messageProperties2String(ib.getProperties()));
            check(store.putMessage(ib).isOk(), "inner batch");
        }
        // Timer messages (HookUtils.transformTimerMessage), due soon: the timer wheel puts them
        // back on their real topic once due.
        long now = System.currentTimeMillis();
        for (int i = 0; i < 3; i++) {
            MessageExtBrokerInner m = message("Timed", 0, ("timer " + i).getBytes(StandardCharsets.UTF_8), "W", "timed-" + i);
            long deliver = (now + 1500) / 100 * 100;
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_TIMER_DELIVER_MS, String.valueOf(deliver));
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_TIMER_OUT_MS, String.valueOf(deliver));
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, m.getTopic());
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, "0");
            m.setTopic(TimerMessageStore.TIMER_TOPIC);
            m.setQueueId(0);
            put(m);
        }
        queues.put("Timed\u00000", 1);
        long deadline = System.currentTimeMillis() + 20_000;
        while (store.getMaxOffsetInQueue("Timed", 0) < 3) {
            check(System.currentTimeMillis() < deadline, "timer messages delivered");
            Thread.sleep(50);
        }
        // A last plain message after the timer's own puts.
        put(message("Orders", 0, "last".getBytes(StandardCharsets.UTF_8), "T9", "last"));
    }

    void waitDispatched() throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (store.dispatchBehindBytes() > 0) {
            check(System.currentTimeMillis() < deadline, "dispatch");
            Thread.sleep(20);
        }
        store.getCommitLog().flush();
    }

    /**
     * RocksDBTopicConfigManager's config/topics/: every topic the store holds, keyed by name, the
     * value TopicConfig as JSON. topics.json keeps only the first, as an export made before the rest.
     */
    void writeRocksDBTopics(String root, Map<String, TopicConfig> topics) throws Exception {
        ConfigRocksDBStorage db = new ConfigRocksDBStorage(root + File.separator + "config" + File.separator + "topics" + File.separator);
        check(db.start(), "config RocksDB");
        boolean first = true;
        for (String q : queues.keySet()) {
            String topic = q.substring(0, q.indexOf('\u0000'));
            if (first) {
                topics.put(topic, new TopicConfig(topic, 4, 4));
                first = false;
            }
            byte[] key = topic.getBytes(StandardCharsets.UTF_8);
            db.put(key, key.length, com.alibaba.fastjson.JSON.toJSONString(new TopicConfig(topic, 4, 4)).getBytes(StandardCharsets.UTF_8));
        }
        db.updateKvDataVersion("{\"counter\":2,\"stateVersion\":0,\"timestamp\":1790000000000}".getBytes(StandardCharsets.UTF_8));
        db.flushWAL();
        check(db.shutdown(), "config RocksDB shutdown");
    }

    /** The broker's config/topics.json for the BatchCQ topic, in TopicConfigManager's shape. */
    static void writeTopicsJson(String root, Map<String, TopicConfig> topics) throws Exception {
        StringBuilder b = new StringBuilder("{\n\t\"dataVersion\":{\n\t\t\"counter\":1,\n\t\t\"stateVersion\":0,\n\t\t\"timestamp\":")
            .append(BORN).append("\n\t},\n\t\"topicConfigTable\":{");
        String sep = "\n";
        for (TopicConfig t : topics.values()) {
            b.append(sep).append("\t\t").append(str(t.getTopicName())).append(":{\n\t\t\t\"attributes\":{");
            String s2 = "";
            for (Map.Entry<String, String> e : t.getAttributes().entrySet()) {
                b.append(s2).append(str(e.getKey())).append(":").append(str(e.getValue()));
                s2 = ",";
            }
            b.append("},\n\t\t\t\"order\":false,\n\t\t\t\"perm\":").append(t.getPerm())
                .append(",\n\t\t\t\"readQueueNums\":").append(t.getReadQueueNums())
                .append(",\n\t\t\t\"topicFilterType\":\"SINGLE_TAG\",\n\t\t\t\"topicName\":").append(str(t.getTopicName()))
                .append(",\n\t\t\t\"topicSysFlag\":0,\n\t\t\t\"writeQueueNums\":").append(t.getWriteQueueNums()).append("\n\t\t}");
            sep = ",\n";
        }
        b.append("\n\t}\n}");
        File config = new File(root, "config");
        config.mkdirs();
        try (Writer out = new OutputStreamWriter(new FileOutputStream(new File(config, "topics.json")), StandardCharsets.UTF_8)) {
            out.write(b.toString());
        }
    }

    /** What a consumer gets for every queue offset (PullAPIWrapper: decode, inflate, unwrap). */
    String answers() throws Exception {
        StringBuilder b = new StringBuilder("{\"queues\": [");
        String sep = "\n";
        for (String q : queues.keySet()) {
            String topic = q.substring(0, q.indexOf('\u0000'));
            int queueId = Integer.parseInt(q.substring(q.indexOf('\u0000') + 1));
            long min = store.getMinOffsetInQueue(topic, queueId);
            long max = store.getMaxOffsetInQueue(topic, queueId);
            b.append(sep).append("{\"topic\": ").append(str(topic)).append(", \"queue\": ").append(queueId)
                .append(", \"min\": ").append(min).append(", \"max\": ").append(max).append(", \"messages\": [");
            sep = ",\n";
            String msep = "\n";
            for (long offset = min; offset < max; offset++) {
                GetMessageResult r = store.getMessage("mqfs", topic, queueId, offset, 1, null);
                check(r != null && r.getMessageBufferList() != null && !r.getMessageBufferList().isEmpty(),
                    "getMessage " + topic + " " + queueId + " " + offset);
                MessageExt first = MessageDecoder.decode(r.getMessageBufferList().get(0), true, true, true);
                MessageExt got = first;
                for (MessageExt m : unwrap(first)) {
                    if (m.getQueueOffset() == offset) {
                        got = m;  // an inner batch answers from its first offset: the consumer picks this one
                    }
                }
                r.release();
                if (keys.isEmpty() || collectKeys) {
                    collectKeys = true;  // read mode: the keys of what the store holds
                    String uniq = got.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
                    for (String k : ((got.getKeys() == null ? "" : got.getKeys()) + " " + (uniq == null ? "" : uniq)).split(" ")) {
                        if (!k.isEmpty() && !keys.contains(got.getTopic() + "\u0000" + k)) {
                            keys.add(got.getTopic() + "\u0000" + k);
                        }
                    }
                }
                b.append(msep).append("{\"at\": ").append(offset).append(", ").append(message(got).substring(1));
                msep = ",\n";
            }
            b.append("], \"bytime\": [");
            // getOffsetInQueueByTime either side of and at every store time the queue holds
            TreeMap<Long, Boolean> times = new TreeMap<>();
            for (long offset = min; offset < max; offset++) {
                GetMessageResult r = store.getMessage("mqfs", topic, queueId, offset, 1, null);
                times.put(MessageDecoder.decode(r.getMessageBufferList().get(0), false, false, false).getStoreTimestamp(), true);
                r.release();
            }
            String tsep = "";
            for (long t : times.keySet()) {
                for (long ts = t - 1; ts <= t + 1; ts++) {
                    b.append(tsep).append("[").append(ts).append(", ")
                        .append(store.getOffsetInQueueByTime(topic, queueId, ts, BoundaryType.LOWER)).append(", ")
                        .append(store.getOffsetInQueueByTime(topic, queueId, ts, BoundaryType.UPPER)).append("]");
                    tsep = ", ";
                }
            }
            b.append("]}");
        }
        b.append("],\n\"keys\": [");
        sep = "\n";
        for (String k : keys) {
            String topic = k.substring(0, k.indexOf('\u0000'));
            String key = k.substring(k.indexOf('\u0000') + 1);
            QueryMessageResult r = store.queryMessage(topic, key, 64, 0, Long.MAX_VALUE);
            b.append(sep).append("{\"topic\": ").append(str(topic)).append(", \"key\": ").append(str(key)).append(", \"commitlog\": [");
            sep = ",\n";
            String s2 = "";
            for (ByteBuffer buf : r.getMessageBufferList()) {
                MessageExt m = MessageDecoder.decode(buf, false, false, false);
                b.append(s2).append(m.getCommitLogOffset());
                s2 = ", ";
            }
            r.release();
            b.append("]}");
        }
        return b.append("]}\n").toString();
    }

    static List<MessageExt> unwrap(MessageExt m) throws Exception {
        List<MessageExt> out = new ArrayList<>();
        if (MessageSysFlag.check(m.getSysFlag(), MessageSysFlag.NEED_UNWRAP_FLAG)) {
            MessageDecoder.decodeMessage(m, out);
        } else {
            out.add(m);
        }
        return out;
    }

    static String message(MessageExt m) {
        Map<String, String> props = m.getProperties() == null ? new TreeMap<>() : new TreeMap<>(m.getProperties());
        StringBuilder b = new StringBuilder("{\"offset\": ").append(m.getQueueOffset())
            .append(", \"topic\": ").append(str(m.getTopic()))
            .append(", \"queue\": ").append(m.getQueueId())
            .append(", \"commitlog\": ").append(m.getCommitLogOffset())
            .append(", \"size\": ").append(m.getStoreSize())
            .append(", \"sysflag\": ").append(m.getSysFlag())
            .append(", \"flag\": ").append(m.getFlag())
            .append(", \"born\": ").append(m.getBornTimestamp())
            .append(", \"stored\": ").append(m.getStoreTimestamp())
            .append(", \"reconsume\": ").append(m.getReconsumeTimes())
            .append(", \"msgid\": ").append(str(m.getMsgId()))
            .append(", \"offsetmsgid\": ").append(offsetMsgId(m) == null ? "null" : str(offsetMsgId(m)))
            .append(", \"tags\": ").append(m.getTags() == null ? "null" : str(m.getTags()))
            .append(", \"keys\": ").append(m.getKeys() == null ? "null" : str(m.getKeys()))
            .append(", \"properties\": {");
        String sep = "";
        for (Map.Entry<String, String> e : props.entrySet()) {
            b.append(sep).append(str(e.getKey())).append(": ").append(str(e.getValue()));
            sep = ", ";
        }
        return b.append("}, \"body\": ").append(str(Base64.getEncoder().encodeToString(m.getBody()))).append("}").toString();
    }

    /** The record's offset id (a consumer's getOffsetMsgId); none for an unwrapped inner message. */
    static String offsetMsgId(MessageExt m) {
        return m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null;
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
