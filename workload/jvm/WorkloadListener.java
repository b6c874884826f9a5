package lakecluster.workload;

import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.StartsWith;
import org.apache.spark.sql.catalyst.plans.QueryPlan;
import org.apache.spark.sql.execution.FileSourceScanExec;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.QueryStageExec;
import org.apache.spark.sql.execution.exchange.ReusedExchangeExec;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.util.QueryExecutionListener;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Records, for every successful query, the filters each scan of a Delta table was given and the
 * files it read, into the table's {@code _lakecluster/workload/} folder (docs/workload.md).
 *
 * <p>Enabled in any Spark application with two settings ({@code lakecluster workload
 * --listener-conf} prints them): the jar on {@code spark.jars} and
 * {@code spark.sql.queryExecutionListeners=lakecluster.workload.WorkloadListener}. Spark calls
 * {@link #onSuccess} on its listener bus thread, after the query has returned to the user: the
 * plan walk here costs the query nothing, and the files are written by {@link WorkloadWriter}'s
 * own thread. Nothing here may fail a query or the listener bus: every failure is caught and
 * logged once.
 *
 * <p>Delta's classes are reached by reflection only (their names and a few accessors), so the jar
 * works with any delta-spark 4.x the application brings.
 */
public class WorkloadListener implements QueryExecutionListener {
    /** The record format's version: readers skip records of a version they do not know. */
    public static final int FORMAT_VERSION = 1;
    static final String TAHOE_FILE_INDEX = "org.apache.spark.sql.delta.files.TahoeFileIndex";
    static final int MAX_STRING_CHARS = 1024;  // a longer literal is kept as an "other" predicate
    static final int MAX_SQL_CHARS = 200;

    @Override
    public void onSuccess(String funcName, QueryExecution qe, long durationNs) {
        try {
            WorkloadWriter writer = WorkloadWriter.of(qe.sparkSession().sparkContext());
            if (writer == null) {
                return;  // spark.lakecluster.workload.enabled=false
            }
            capture(writer, funcName, qe, durationNs);
        } catch (Throwable t) {  // never the user's problem: not even an error of ours
            WorkloadWriter.warnOnce("capture", "a query's scans could not be recorded", t);
        }
    }

    @Override
    public void onFailure(String funcName, QueryExecution qe, Exception exception) {
        // Failed queries are not part of the workload a layout should serve.
    }

    /** Writes every buffered record now (tests; an application that wants its records at once). */
    public void flush() {
        flushAll();
    }

    /** Capture files this JVM failed to write (their records were dropped, and logged once per table). */
    public static long failedWrites() {
        return WorkloadWriter.FAILED_WRITES.get();
    }

    /** Writes every buffered record of this JVM now. */
    public static void flushAll() {
        WorkloadWriter.flushAllNow();
    }

    private static void capture(WorkloadWriter writer, String funcName, QueryExecution qe, long durationNs) {
        List<FileSourceScanExec> scans = new ArrayList<>();
        collect(qe.executedPlan(), scans, new IdentityHashMap<>());
        List<FileSourceScanExec> delta = new ArrayList<>();
        for (FileSourceScanExec scan : scans) {
            if (isDelta(scan.relation().location())) {
                delta.add(scan);
            }
        }
        if (delta.isEmpty()) {
            return;
        }
        long now = System.currentTimeMillis();
        String appId = qe.sparkSession().sparkContext().applicationId();
        String appName = qe.sparkSession().sparkContext().appName();
        for (int i = 0; i < delta.size(); i++) {
            FileSourceScanExec scan = delta.get(i);
            Object location = scan.relation().location();
            Path root = tablePath(location);
            if (root == null) {
                continue;
            }
            int maxIn = writer.settings().maxInValues;
            StringBuilder json = new StringBuilder(256);
            json.append("{\"v\":").append(FORMAT_VERSION)
                .append(",\"time_ms\":").append(now)
                .append(",\"app_id\":"); Json.string(json, appId);
            json.append(",\"app_name\":"); Json.string(json, appName);
            json.append(",\"execution_id\":").append(qe.id())
                .append(",\"query\":"); Json.string(json, funcName);
            json.append(",\"duration_ms\":").append(durationNs / 1_000_000)
                .append(",\"table\":"); Json.string(json, root.toString());
            json.append(",\"table_version\":"); Json.number(json, version(location));
            json.append(",\"scan\":").append(i).append(",\"scans\":").append(delta.size());
            json.append(",\"filters\":");
            predicates(json, scan.dataFilters(), maxIn);
            json.append(",\"partition_filters\":");
            predicates(json, scan.partitionFilters(), maxIn);
            json.append(",\"files_read\":"); Json.number(json, metric(scan, "numFiles"));
            json.append(",\"bytes_read\":"); Json.number(json, metric(scan, "filesSize"));
            json.append(",\"files_total\":"); Json.number(json, filesInSnapshot(location));
            json.append("}");
            writer.add(root, qe.sparkSession().sessionState().newHadoopConf(), json.toString());
        }
    }

    // -- the plan ------------------------------------------------------------------------------

    /** Every file scan of the executed plan: adaptive plans, query stages and subqueries included,
     * each once (a reused exchange is the same scan read again). */
    static void collect(SparkPlan plan, List<FileSourceScanExec> out, Map<Object, Boolean> seen) {
        if (plan == null || seen.put(plan, Boolean.TRUE) != null) {
            return;
        }
        if (plan instanceof FileSourceScanExec) {
            out.add((FileSourceScanExec) plan);
        }
        if (plan instanceof ReusedExchangeExec) {
            return;
        }
        if (plan instanceof AdaptiveSparkPlanExec) {
            collect(((AdaptiveSparkPlanExec) plan).executedPlan(), out, seen);
        } else if (plan instanceof QueryStageExec) {
            collect(((QueryStageExec) plan).plan(), out, seen);
        }
        scala.collection.Iterator<SparkPlan> children = plan.children().iterator();
        while (children.hasNext()) {
            collect(children.next(), out, seen);
        }
        scala.collection.Iterator<QueryPlan<?>> inner = plan.innerChildren().iterator();
        while (inner.hasNext()) {
            QueryPlan<?> child = inner.next();
            if (child instanceof SparkPlan) {
                collect((SparkPlan) child, out, seen);
            }
        }
        scala.collection.Iterator<SparkPlan> subqueries = plan.subqueries().iterator();
        while (subqueries.hasNext()) {
            collect(subqueries.next(), out, seen);
        }
    }

    static boolean isDelta(Object location) {
        for (Class<?> c = location.getClass(); c != null; c = c.getSuperclass()) {
            if (TAHOE_FILE_INDEX.equals(c.getName())) {
                return true;
            }
        }
        return false;
    }

    /** The table's root: Delta's {@code TahoeFileIndex.path()}. */
    static Path tablePath(Object location) {
        Object path = call(location, "path");
        return path instanceof Path ? (Path) path : null;
    }

    /** The version of the table the scan read, when its file index knows it. */
    static Long version(Object location) {
        Object v = call(location, "version");
        return v instanceof Long ? (Long) v : null;
    }

    /** The files of the snapshot the scan read: Delta's prepared scan counted them while skipping
     * (every file of the snapshot); else the snapshot's count when it is known without a job. */
    static Long filesInSnapshot(Object location) {
        Object scan = call(location, "preparedScan");
        if (scan != null) {
            Long files = optionLong(call(call(scan, "total"), "files"));
            if (files != null) {
                return files;
            }
        }
        return optionLong(call(location, "numOfFilesIfKnown"));
    }

    static Long metric(FileSourceScanExec scan, String name) {
        scala.Option<SQLMetric> m = scan.metrics().get(name);
        return m.isDefined() ? m.get().value() : null;
    }

    private static Long optionLong(Object option) {
        if (option instanceof scala.Option && ((scala.Option<?>) option).isDefined()) {
            Object v = ((scala.Option<?>) option).get();
            return v instanceof Number ? ((Number) v).longValue() : null;
        }
        return null;
    }

    /** A public no-argument method's result, or null when there is none or it fails. */
    private static Object call(Object target, String method) {
        if (target == null) {
            return null;
        }
        try {
            return target.getClass().getMethod(method).invoke(target);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    // -- predicates ----------------------------------------------------------------------------

    /** The filters as a JSON array: each top-level AND term one predicate; an {@code IS NOT NULL}
     * Spark inferred beside another predicate on the same column left out. */
    static void predicates(StringBuilder json, scala.collection.immutable.Seq<Expression> filters, int maxIn) {
        List<Expression> terms = new ArrayList<>();
        scala.collection.Iterator<Expression> it = filters.iterator();
        while (it.hasNext()) {
            split(it.next(), terms);
        }
        Set<String> constrained = new LinkedHashSet<>();
        for (Expression e : terms) {
            if (!(e instanceof IsNotNull)) {
                constrained.addAll(columns(e));
            }
        }
        json.append('[');
        boolean first = true;
        for (Expression e : terms) {
            if (e instanceof IsNotNull && constrained.containsAll(columns(e))) {
                continue;
            }
            if (!first) {
                json.append(',');
            }
            first = false;
            predicate(json, e, maxIn);
        }
        json.append(']');
    }

    private static void split(Expression e, List<Expression> out) {
        if (e instanceof And) {
            split(((And) e).left(), out);
            split(((And) e).right(), out);
        } else {
            out.add(e);
        }
    }

    private static Set<String> columns(Expression e) {
        Set<String> names = new LinkedHashSet<>();
        scala.collection.Iterator<Attribute> it = e.references().iterator();
        while (it.hasNext()) {
            names.add(it.next().name());
        }
        return names;
    }

    private static String column(Expression e) {
        return e instanceof Attribute ? ((Attribute) e).name() : null;
    }

    static void predicate(StringBuilder json, Expression e, int maxIn) {
        int mark = json.length();
        if (!simple(json, e, maxIn)) {
            json.setLength(mark);
            other(json, e);
        }
    }

    private static final Map<Class<?>, String> OPS = new LinkedHashMap<>();
    private static final Map<String, String> FLIPPED = Map.of("=", "=", "<=>", "<=>", "<", ">", "<=", ">=",
            ">", "<", ">=", "<=");

    static {
        OPS.put(EqualTo.class, "=");
        OPS.put(EqualNullSafe.class, "<=>");
        OPS.put(LessThan.class, "<");
        OPS.put(LessThanOrEqual.class, "<=");
        OPS.put(GreaterThan.class, ">");
        OPS.put(GreaterThanOrEqual.class, ">=");
    }

    /** One predicate of a column and constants; false when the expression has another shape. */
    private static boolean simple(StringBuilder json, Expression e, int maxIn) {
        if (e instanceof BinaryComparison && OPS.containsKey(e.getClass())) {
            BinaryComparison c = (BinaryComparison) e;
            String op = OPS.get(e.getClass());
            Expression col = c.left();
            Expression lit = c.right();
            if (!(lit instanceof Literal)) {
                col = c.right();
                lit = c.left();
                op = FLIPPED.get(op);
            }
            return compare(json, column(col), op, lit);
        }
        if (e instanceof Not) {
            Expression inner = ((Not) e).child();
            if (inner instanceof EqualTo) {
                BinaryComparison c = (BinaryComparison) inner;
                boolean litRight = c.right() instanceof Literal;
                return compare(json, column(litRight ? c.left() : c.right()), "!=", litRight ? c.right() : c.left());
            }
            if (inner instanceof In || inner instanceof InSet) {
                return in(json, inner, "not_in", maxIn);
            }
            return false;
        }
        if (e instanceof In || e instanceof InSet) {
            return in(json, e, "in", maxIn);
        }
        if (e instanceof Or) {
            List<Object> values = new ArrayList<>();
            String name = orOfEqualities(e, values);
            if (name == null) {
                return false;
            }
            DataType type = ((Attribute) ((Or) e).references().head()).dataType();
            return list(json, name, type, "in", values, maxIn);
        }
        if (e instanceof StartsWith) {
            StartsWith s = (StartsWith) e;
            return compare(json, column(s.left()), "starts_with", s.right());
        }
        if (e instanceof IsNull || e instanceof IsNotNull) {
            String name = column(e.children().head());
            if (name == null) {
                return false;
            }
            json.append("{\"column\":");
            Json.string(json, name);
            json.append(",\"op\":\"").append(e instanceof IsNull ? "is_null" : "is_not_null").append("\"}");
            return true;
        }
        return false;
    }

    private static boolean compare(StringBuilder json, String name, String op, Expression lit) {
        if (name == null || op == null || !(lit instanceof Literal)) {
            return false;
        }
        Literal l = (Literal) lit;
        json.append("{\"column\":");
        Json.string(json, name);
        json.append(",\"type\":");
        Json.string(json, l.dataType().simpleString());
        json.append(",\"op\":\"").append(op).append("\",\"value\":");
        if (!value(json, l.value(), l.dataType())) {
            return false;
        }
        json.append('}');
        return true;
    }

    /** {@code col = a OR col = b OR col IN (...)}: the column and the values; null for any other OR. */
    private static String orOfEqualities(Expression e, List<Object> values) {
        if (e instanceof Or) {
            String left = orOfEqualities(((Or) e).left(), values);
            String right = orOfEqualities(((Or) e).right(), values);
            return left != null && left.equals(right) ? left : null;
        }
        if (e instanceof EqualTo) {
            EqualTo eq = (EqualTo) e;
            boolean litRight = eq.right() instanceof Literal;
            Expression lit = litRight ? eq.right() : eq.left();
            String name = column(litRight ? eq.left() : eq.right());
            if (name == null || !(lit instanceof Literal)) {
                return null;
            }
            values.add(((Literal) lit).value());
            return name;
        }
        if (e instanceof In) {
            In in = (In) e;
            return literals(in, values) ? column(in.value()) : null;
        }
        return null;
    }

    /** Adds the values of {@code in}'s list; false (values partly added) when an item is not a literal. */
    private static boolean literals(In in, List<Object> values) {
        scala.collection.Iterator<Expression> it = in.list().iterator();
        while (it.hasNext()) {
            Expression item = it.next();
            if (!(item instanceof Literal)) {
                return false;
            }
            values.add(((Literal) item).value());
        }
        return true;
    }

    private static boolean in(StringBuilder json, Expression e, String op, int maxIn) {
        List<Object> values = new ArrayList<>();
        Expression child;
        if (e instanceof In) {
            In in = (In) e;
            child = in.value();
            if (!literals(in, values)) {
                return false;
            }
        } else {
            InSet in = (InSet) e;
            child = in.child();
            scala.collection.Iterator<Object> it = in.hset().iterator();
            while (it.hasNext()) {
                values.add(it.next());
            }
        }
        String name = column(child);
        return name != null && list(json, name, child.dataType(), op, values, maxIn);
    }

    /** A list of values, sorted: all of them up to {@code maxIn}, else their count, smallest and largest. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private static boolean list(StringBuilder json, String name, DataType type, String op, List<Object> values,
                                int maxIn) {
        List<Object> distinct = new ArrayList<>(new LinkedHashSet<>(values));
        distinct.remove(null);
        try {  // one order whatever the query's (an InSet's is a hash set's)
            distinct.sort((a, b) -> ((Comparable) a).compareTo(b));
        } catch (ClassCastException e) {
            // values without an order: kept as given
        }
        json.append("{\"column\":");
        Json.string(json, name);
        json.append(",\"type\":");
        Json.string(json, type.simpleString());
        json.append(",\"op\":\"").append(op).append('"');
        if (distinct.size() <= maxIn) {
            json.append(",\"values\":[");
            for (int i = 0; i < distinct.size(); i++) {
                if (i > 0) {
                    json.append(',');
                }
                if (!value(json, distinct.get(i), type)) {
                    return false;
                }
            }
            json.append(']');
        } else {
            Comparable min = null;
            Comparable max = null;
            for (Object v : distinct) {
                if (!(v instanceof Comparable)) {
                    return false;
                }
                Comparable c = (Comparable) v;
                if (min == null || c.compareTo(min) < 0) {
                    min = c;
                }
                if (max == null || c.compareTo(max) > 0) {
                    max = c;
                }
            }
            json.append(",\"count\":").append(distinct.size()).append(",\"min\":");
            if (!value(json, min, type)) {
                return false;
            }
            json.append(",\"max\":");
            if (!value(json, max, type)) {
                return false;
            }
        }
        json.append('}');
        return true;
    }

    private static void other(StringBuilder json, Expression e) {
        json.append("{\"op\":\"other\",\"columns\":[");
        boolean first = true;
        for (String name : columns(e)) {
            if (!first) {
                json.append(',');
            }
            first = false;
            Json.string(json, name);
        }
        json.append("],\"sql\":");
        String sql;
        try {
            sql = e.sql();
        } catch (RuntimeException ex) {
            sql = e.prettyName();
        }
        Json.string(json, sql.length() > MAX_SQL_CHARS ? sql.substring(0, MAX_SQL_CHARS) + "..." : sql);
        json.append('}');
    }

    /** A Catalyst value of {@code type} as JSON: numbers as numbers (decimals as exact strings), dates
     * and timestamps as ISO-8601 strings (timestamps in UTC), NaN and infinities as strings. */
    static boolean value(StringBuilder json, Object v, DataType type) {
        if (v == null) {
            json.append("null");
            return true;
        }
        if (type instanceof StringType && v instanceof UTF8String) {
            String s = v.toString();
            if (s.length() > MAX_STRING_CHARS) {
                return false;
            }
            Json.string(json, s);
        } else if (type instanceof IntegerType || type instanceof LongType || type instanceof ShortType
                || type instanceof ByteType) {
            json.append(((Number) v).longValue());
        } else if (type instanceof DoubleType || type instanceof FloatType) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                Json.string(json, Double.isNaN(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
            } else {
                json.append(v instanceof Float ? Float.toString((Float) v) : Double.toString(d));
            }
        } else if (type instanceof DecimalType && v instanceof Decimal) {
            Json.string(json, ((Decimal) v).toJavaBigDecimal().toPlainString());
        } else if (type instanceof DateType) {
            Json.string(json, LocalDate.ofEpochDay(((Number) v).intValue()).toString());
        } else if (type instanceof TimestampType) {
            long micros = ((Number) v).longValue();
            Json.string(json, Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
                    Math.floorMod(micros, 1_000_000L) * 1000L).toString());
        } else if (type instanceof TimestampNTZType) {
            long micros = ((Number) v).longValue();
            Json.string(json, LocalDateTime.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
                    (int) (Math.floorMod(micros, 1_000_000L) * 1000L), ZoneOffset.UTC).toString());
        } else if (type instanceof BooleanType) {
            json.append(((Boolean) v).booleanValue());
        } else {
            return false;  // binary, nested, intervals...: no range of a column statistics can use
        }
        return true;
    }

    /** A small JSON writer: strings escaped as RFC 8259 asks. */
    static final class Json {
        private Json() {}

        static void string(StringBuilder out, String s) {
            if (s == null) {
                out.append("null");
                return;
            }
            out.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': out.append("\\\""); break;
                    case '\\': out.append("\\\\"); break;
                    case '\n': out.append("\\n"); break;
                    case '\r': out.append("\\r"); break;
                    case '\t': out.append("\\t"); break;
                    default:
                        if (c < 0x20 || c == 0x2028 || c == 0x2029) {
                            out.append(String.format("\\u%04x", (int) c));
                        } else {
                            out.append(c);
                        }
                }
            }
            out.append('"');
        }

        static void number(StringBuilder out, Long n) {
            out.append(n == null ? "null" : n.toString());
        }
    }
}
