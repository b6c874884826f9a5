package lakecluster.workload;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The capture records of one JVM, buffered per table and written as new, immutable JSON-lines
 * files under {@code <table>/_lakecluster/workload/day=<yyyy-mm-dd>/}.
 *
 * <p>Each application writes only files of its own, named by the time, its application id and a
 * random token, and never opens a file it did not create: any number of applications capture
 * into one table at once without coordination. A file is written whole under a hidden name and
 * renamed on local disks (readers skip names starting with '.'); an object store makes a PUT
 * visible whole. A buffer is written when it holds {@code flushRecords} records or
 * {@code maxFileBytes}, when its oldest record is {@code flushSeconds} old (checked every
 * second by this class's daemon thread), at the application's end and at JVM shutdown.
 *
 * <p>Bounds: at most {@code maxPendingBytes} buffered in the JVM and
 * {@code maxBytesPerAppDay} written per table and UTC day by one application; records beyond
 * either are dropped (logged once). A failed write drops its
 * records (they are never retried: a table the application cannot write to costs nothing) and is
 * logged once per table. Deleting old files is the compactor's (docs/workload.md).
 */
final class WorkloadWriter {
    static final String FOLDER = "_lakecluster/workload";
    static final String PREFIX = "spark.lakecluster.workload.";
    static final int MAX_RECORD_CHARS = 64 << 10;  // a longer record (thousands of filters) is dropped
    private static final Logger LOG = LoggerFactory.getLogger("lakecluster.workload");
    private static final Set<String> WARNED = ConcurrentHashMap.newKeySet();
    static final AtomicLong FAILED_WRITES = new AtomicLong();  // files not written, since the JVM started
    private static volatile WorkloadWriter instance;
    private static volatile boolean disabled;

    /** The listener's settings (Spark conf keys under {@code spark.lakecluster.workload.}). */
    static final class Settings {
        // The defaults of lakecluster's [workload] keys (docs/configuration.md); a test compares them.
        static final long FLUSH_RECORDS = 1000;
        static final double FLUSH_SECONDS = 300;
        static final long MAX_IN_VALUES = 32;
        static final long MAX_FILE_BYTES = 1L << 20;
        static final long MAX_BYTES_PER_APP_DAY = 16L << 20;
        static final long MAX_PENDING_BYTES = 8L << 20;

        final boolean enabled;
        final long flushRecords;
        final long flushMillis;
        final int maxInValues;
        final long maxFileBytes;
        final long maxBytesPerAppDay;
        final long maxPendingBytes;

        Settings(SparkConf conf) {
            enabled = conf.getBoolean(PREFIX + "enabled", true);
            flushRecords = Math.max(1, conf.getLong(PREFIX + "flushRecords", FLUSH_RECORDS));
            flushMillis = (long) Math.max(100, 1000 * conf.getDouble(PREFIX + "flushSeconds", FLUSH_SECONDS));
            maxInValues = (int) Math.max(0, Math.min(100_000, conf.getLong(PREFIX + "maxInValues", MAX_IN_VALUES)));
            maxFileBytes = Math.max(4096, conf.getLong(PREFIX + "maxFileBytes", MAX_FILE_BYTES));
            maxBytesPerAppDay = conf.getLong(PREFIX + "maxBytesPerAppDay", MAX_BYTES_PER_APP_DAY);
            maxPendingBytes = conf.getLong(PREFIX + "maxPendingBytes", MAX_PENDING_BYTES);
        }
    }

    private static final class Buffer {
        final String key;  // the table, whatever form the application named it in (tableKey)
        final Path root;
        Configuration hadoopConf;
        final StringBuilder lines = new StringBuilder();
        int records;
        long firstMs;

        Buffer(String key, Path root) {
            this.key = key;
            this.root = root;
        }
    }

    private final Settings settings;
    private volatile String appToken;
    private volatile SparkContext context;
    private final Map<String, Buffer> buffers = new LinkedHashMap<>();
    private final Map<String, Long> writtenToday = new HashMap<>();  // "<root> <day>" -> bytes
    private final AtomicLong sequence = new AtomicLong();
    private long pendingBytes;
    private ScheduledExecutorService timer;

    private WorkloadWriter(Settings settings, String appId) {
        this.settings = settings;
        this.appToken = safe(appId);
    }

    /** The JVM's writer, made on first use from the application's settings; null when capture is
     * turned off. */
    static WorkloadWriter of(SparkContext sc) {
        WorkloadWriter w = instance;
        if ((w != null && w.context == sc) || disabled) {
            return w;
        }
        synchronized (WorkloadWriter.class) {
            if (instance == null && !disabled) {
                Settings settings = new Settings(sc.getConf());
                if (!settings.enabled) {
                    disabled = true;
                    return null;
                }
                WorkloadWriter made = new WorkloadWriter(settings, sc.applicationId());
                made.start();
                instance = made;
            }
            if (instance != null && instance.context != sc) {
                instance.attach(sc);  // the first context, or a new one after the old was stopped
            }
            return instance;
        }
    }

    static void flushAllNow() {
        WorkloadWriter w = instance;
        if (w != null) {
            w.flush(true);
            try {  // and the full buffers handed to the writer thread before
                w.timer.submit(() -> { }).get(60, TimeUnit.SECONDS);
            } catch (Exception e) {
                warnOnce("flush", "waiting for the writer thread failed", e);
            }
        }
    }

    Settings settings() {
        return settings;
    }

    /** Writes what is buffered when {@code sc}'s application ends; later files carry its id. */
    private synchronized void attach(SparkContext sc) {
        context = sc;
        appToken = safe(sc.applicationId());
        sc.addSparkListener(new SparkListener() {
            @Override
            public void onApplicationEnd(SparkListenerApplicationEnd end) {
                flush(true);
            }
        });
    }

    private void start() {
        timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "lakecluster-workload-writer");
            t.setDaemon(true);
            return t;
        });
        timer.scheduleWithFixedDelay(() -> flush(false), 1, 1, TimeUnit.SECONDS);
        // After Spark's own hooks (priority 40 in Hadoop's manager), before file systems close (10).
        org.apache.hadoop.util.ShutdownHookManager.get().addShutdownHook(() -> flush(true),
                FileSystem.SHUTDOWN_HOOK_PRIORITY + 20);
    }

    /** Buffers one record of the table at {@code root}. */
    void add(Path root, Configuration hadoopConf, String line) {
        if (line.length() > MAX_RECORD_CHARS) {
            warnOnce("record", "a record of " + line.length() + " characters dropped (at most " + MAX_RECORD_CHARS
                    + ")", null);
            return;
        }
        Buffer full = null;
        synchronized (this) {
            String key = tableKey(root);
            Buffer b = buffers.computeIfAbsent(key, k -> new Buffer(k, root));
            int bytes = line.length() + 1;
            if (pendingBytes + bytes > settings.maxPendingBytes) {
                warnOnce("pending", "records dropped: more than " + settings.maxPendingBytes
                        + " bytes waiting to be written (spark.lakecluster.workload.maxPendingBytes)", null);
                return;
            }
            b.hadoopConf = hadoopConf;
            if (b.records == 0) {
                b.firstMs = System.currentTimeMillis();
            }
            b.lines.append(line).append('\n');
            b.records++;
            pendingBytes += bytes;
            if (b.records >= settings.flushRecords || b.lines.length() >= settings.maxFileBytes) {
                full = take(key);
            }
        }
        if (full != null) {
            Buffer taken = full;
            timer.execute(() -> write(taken));  // never on the listener bus thread
        }
    }

    /** Writes the buffers that are due ({@code all}: every buffer). */
    void flush(boolean all) {
        List<Buffer> due = new ArrayList<>();
        synchronized (this) {
            long now = System.currentTimeMillis();
            for (String key : new ArrayList<>(buffers.keySet())) {
                Buffer b = buffers.get(key);
                if (b.records > 0 && (all || now - b.firstMs >= settings.flushMillis)) {
                    due.add(take(key));
                }
            }
        }
        for (Buffer b : due) {
            write(b);
        }
    }

    private Buffer take(String key) {
        Buffer b = buffers.remove(key);
        pendingBytes -= b.lines.length();
        buffers.put(key, new Buffer(key, b.root));
        return b;
    }

    private void write(Buffer b) {
        try {
            long now = System.currentTimeMillis();
            String day = Instant.ofEpochMilli(now).atZone(ZoneOffset.UTC).toLocalDate().toString();
            byte[] body = b.lines.toString().getBytes(StandardCharsets.UTF_8);
            String budgetKey = b.key + " " + day;
            synchronized (this) {
                long written = writtenToday.getOrDefault(budgetKey, 0L);
                if (written + body.length > settings.maxBytesPerAppDay) {
                    warnOnce("budget " + b.key, "records for " + b.root + " dropped until the end of the UTC day: "
                            + "this application wrote " + written + " bytes of them today "
                            + "(spark.lakecluster.workload.maxBytesPerAppDay)", null);
                    return;
                }
                if (written == 0) {  // a new table or day: yesterday's counts are done with
                    writtenToday.keySet().removeIf(k -> !k.endsWith(" " + day));
                }
                writtenToday.put(budgetKey, written + body.length);
            }
            Path folder = new Path(b.root, FOLDER + "/day=" + day);
            String name = String.format("%013d-%s-%06d-%s.jsonl", now, appToken, sequence.incrementAndGet(),
                    UUID.randomUUID().toString().substring(0, 8));
            FileSystem fs = folder.getFileSystem(b.hadoopConf);
            if (fs instanceof LocalFileSystem) {
                fs = ((LocalFileSystem) fs).getRaw();  // no .crc files beside ours
            }
            if ("file".equals(fs.getUri().getScheme())) {
                fs.mkdirs(folder);
                Path hidden = new Path(folder, "." + name + ".tmp");
                try (FSDataOutputStream out = fs.create(hidden, false)) {
                    out.write(body);
                }
                if (!fs.rename(hidden, new Path(folder, name))) {
                    fs.delete(hidden, false);
                    throw new IOException("cannot rename " + hidden + " to " + name);
                }
            } else {
                try (FSDataOutputStream out = fs.create(new Path(folder, name), false)) {
                    out.write(body);  // an object appears whole when the stream closes
                }
            }
            LOG.debug("wrote {} capture record(s) of {} to {}/{}", b.records, b.root, folder, name);
        } catch (Throwable t) {
            FAILED_WRITES.incrementAndGet();
            warnOnce("write " + b.key, b.records + " workload record(s) of " + b.root
                    + " not written (later failures for this table are logged at debug level)", t);
        }
    }

    /** One table's key, whatever form its root was named in: {@code s3a://b/t} and {@code s3://b/t}
     * (and {@code s3n://}) are one table on S3, so one buffer, one file at a time and one daily
     * budget per application. */
    static String tableKey(Path root) {
        String s = root.toString();
        String lower = s.toLowerCase(java.util.Locale.ROOT);
        for (String scheme : new String[] {"s3a://", "s3n://"}) {
            if (lower.startsWith(scheme)) {
                return "s3://" + s.substring(scheme.length());
            }
        }
        return s;
    }

    static void warnOnce(String key, String message, Throwable t) {
        if (WARNED.add(key)) {
            LOG.warn("lakecluster workload capture: " + message + (t == null ? "" : ": " + t), t);
        } else {
            LOG.debug("lakecluster workload capture: " + message, t);
        }
    }

    static String safe(String id) {
        String s = id == null ? "app" : id.replaceAll("[^A-Za-z0-9_-]", "_");
        return s.length() > 64 ? s.substring(0, 64) : s;
    }
}
