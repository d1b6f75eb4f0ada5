import com.netflix.concurrency.limits.limit.AIMDLimit;
import com.netflix.concurrency.limits.limit.AbstractLimit;
import com.netflix.concurrency.limits.limit.Gradient2Limit;
import com.netflix.concurrency.limits.limit.Jitter;
import com.netflix.concurrency.limits.limit.VegasLimit;
import com.netflix.concurrency.limits.limit.measurement.Measurement;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Differential-test oracle: replays a trace of samples through Netflix's AIMDLimit, VegasLimit and
 * Gradient2Limit and compares the limit (and some private state) after every sample.
 *
 * Trace lines (whitespace separated; '#' comments and blank lines ignored):
 *   SEQ <AIMD|VEGAS|GRADIENT2> <initial> <min> <max>
 *   J <double | 0x + 16 hex digits of IEEE-754 bits>
 *   S <rtt_ns> <inflight> <dropped 0|1> <expected_limit> <expected_estimate_bits_hex> [extra]
 *     extra: VEGAS -> rtt_noload (decimal long); GRADIENT2 -> longRtt bits (16 hex digits); AIMD -> ignored
 *
 * J values form one FIFO consumed by VegasLimit (constructor and each probe). The limit is built lazily at the
 * first S line of a sequence (or at its end if it has none), so a constructor draw may be written either just
 * before or just after its SEQ line. At a SEQ line (and at end of input) draws queued before the ending
 * sequence's last S line and still unconsumed are reported as "draws not consumed"; draws queued after that last
 * S line are carried into the new sequence (at end of input nothing is carried).
 *
 * Exit status: 0 no mismatch, 1 at least one mismatch, 2 malformed trace / harness error.
 */
public final class Oracle {
    private static final int MAX_REPORTED = 10;

    static final class Stats {
        long sequences, samples, limitMismatches, estimateMismatches, otherMismatches, drawsUsed;

        void add(Stats o) {
            sequences += o.sequences;
            samples += o.samples;
            limitMismatches += o.limitMismatches;
            estimateMismatches += o.estimateMismatches;
            otherMismatches += o.otherMismatches;
            drawsUsed += o.drawsUsed;
        }

        long mismatches() { return limitMismatches + estimateMismatches + otherMismatches; }
    }

    static final class BadTrace extends RuntimeException {
        BadTrace(String msg) { super(msg); }
    }

    private final Map<String, Stats> stats = new LinkedHashMap<>();
    private final List<String> reported = new ArrayList<>();
    private long totalMismatches = 0;

    // current sequence
    private int seqNo = 0;           // 1-based; 0 = none yet
    private String kind;
    private int initial, min, max;
    private AbstractLimit limit;     // built lazily at the first S line (or at sequence end)
    private boolean aborted;         // Netflix code threw; remaining samples of the sequence are skipped
    private int sampleIdx;           // 0-based index of the next sample within the sequence
    private long drawsAtSeqStart;
    private int carry;               // draws queued since the last S line (or SEQ): they belong to what follows

    private static Field field(Class<?> c, String name) {
        try {
            Field f = c.getDeclaredField(name);
            f.setAccessible(true);
            return f;
        } catch (NoSuchFieldException e) {
            throw new IllegalStateException(e);
        }
    }

    private static final Field VEGAS_ESTIMATE = field(VegasLimit.class, "estimatedLimit");
    private static final Field VEGAS_RTT_NOLOAD = field(VegasLimit.class, "rtt_noload");
    private static final Field G2_ESTIMATE = field(Gradient2Limit.class, "estimatedLimit");
    private static final Field G2_LONG_RTT = field(Gradient2Limit.class, "longRtt");

    Oracle() {
        for (String k : new String[] {"AIMD", "VEGAS", "GRADIENT2"}) {
            stats.put(k, new Stats());
        }
    }

    public static void main(String[] args) throws IOException {
        Oracle o = new Oracle();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        long lineNo = 0;
        try {
            while ((line = in.readLine()) != null) {
                lineNo++;
                o.handle(line.trim(), lineNo);
            }
            o.endSequence(lineNo, true);
            if (Jitter.size() > 0) { // J lines before any SEQ, with no sequence at all
                throw new BadTrace(Jitter.size() + " J value(s) but no sequence");
            }
        } catch (BadTrace | NumberFormatException e) {
            System.out.flush();
            System.err.println("Oracle: malformed trace at line " + lineNo + ": " + e.getMessage());
            System.exit(2);
        }
        o.printSummary();
        System.exit(o.totalMismatches == 0 ? 0 : 1);
    }

    private void handle(String line, long lineNo) {
        if (line.isEmpty() || line.startsWith("#")) {
            return;
        }
        String[] t = line.split("\\s+");
        switch (t[0]) {
            case "SEQ":
                need(t, 5, 5);
                endSequence(lineNo, false);
                startSequence(t);
                break;
            case "J":
                need(t, 2, 2);
                Jitter.push(parseDouble(t[1]));
                carry++;
                break;
            case "S":
                need(t, 5, 7);
                if (seqNo == 0) {
                    throw new BadTrace("S line before any SEQ line");
                }
                sample(t, lineNo);
                carry = 0;
                break;
            default:
                throw new BadTrace("unknown record type '" + t[0] + "'");
        }
    }

    private static void need(String[] t, int minCols, int maxCols) {
        if (t.length < minCols || t.length > maxCols) {
            throw new BadTrace(t[0] + " line needs " + minCols + (minCols == maxCols ? "" : ".." + maxCols)
                    + " columns, got " + t.length);
        }
    }

    private static double parseDouble(String s) {
        if (s.startsWith("0x") || s.startsWith("0X")) {
            return Double.longBitsToDouble(parseBits(s));
        }
        return Double.parseDouble(s);
    }

    /** 16 hex digits (an optional 0x prefix is tolerated). */
    private static long parseBits(String s) {
        String h = (s.startsWith("0x") || s.startsWith("0X")) ? s.substring(2) : s;
        if (h.length() != 16) {
            throw new BadTrace("expected 16 hex digits, got '" + s + "'");
        }
        return Long.parseUnsignedLong(h, 16);
    }

    private static String hex(long bits) {
        return String.format("%016x", bits);
    }

    private static String dbl(long bits) {
        return hex(bits) + " (" + Double.longBitsToDouble(bits) + ")";
    }

    private void startSequence(String[] t) {
        kind = t[1];
        if (!stats.containsKey(kind)) {
            throw new BadTrace("unknown kind '" + kind + "' (AIMD, VEGAS or GRADIENT2)");
        }
        initial = Integer.parseInt(t[2]);
        min = Integer.parseInt(t[3]);
        max = Integer.parseInt(t[4]);
        if (kind.equals("VEGAS") && min != 1) {
            throw new BadTrace("VEGAS sequences must have min 1 (Netflix's VegasLimit has a fixed floor of 1), got " + min);
        }
        seqNo++;
        limit = null;
        aborted = false;
        sampleIdx = 0;
        drawsAtSeqStart = Jitter.used();
        stats.get(kind).sequences++;
    }

    private AbstractLimit build() {
        switch (kind) {
            case "AIMD":
                return AIMDLimit.newBuilder().initialLimit(initial).minLimit(min).maxLimit(max).build();
            case "VEGAS":
                return VegasLimit.newBuilder().initialLimit(initial).maxConcurrency(max).build();
            case "GRADIENT2":
                return Gradient2Limit.newBuilder().initialLimit(initial).minLimit(min).maxConcurrency(max).build();
            default:
                throw new IllegalStateException(kind);
        }
    }

    /** Builds the limit if not built yet; returns false (and records a mismatch) if Netflix's code threw. */
    private boolean ensureBuilt(long lineNo) {
        if (limit != null) {
            return true;
        }
        try {
            limit = build();
            return true;
        } catch (RuntimeException e) {
            aborted = true;
            mismatch("other", lineNo, "construction threw " + e);
            return false;
        }
    }

    private void endSequence(long lineNo, boolean atEnd) {
        if (seqNo == 0 || kind == null) {
            return; // J lines before the first SEQ simply stay queued (carry)
        }
        if (limit == null && !aborted) {
            ensureBuilt(lineNo); // a sequence without samples still consumes the constructor's draw
        }
        // Draws queued after the sequence's last S line are carried over to the next sequence (a J line may
        // precede the SEQ line whose constructor consumes it); at end of input nothing is carried.
        int keep = atEnd ? 0 : Math.min(carry, Jitter.size());
        int left = Jitter.size() - keep;
        if (left > 0) {
            mismatch("other", lineNo, "draws not consumed: " + left + " J value(s) left in the queue at sequence end");
            Jitter.discardOldest(left);
        }
        carry = keep;
        stats.get(kind).drawsUsed += Jitter.used() - drawsAtSeqStart;
        kind = null;
    }

    private void sample(String[] t, long lineNo) {
        long rtt = Long.parseLong(t[1]);
        int inflight = Integer.parseInt(t[2]);
        boolean dropped;
        if (t[3].equals("0")) {
            dropped = false;
        } else if (t[3].equals("1")) {
            dropped = true;
        } else {
            throw new BadTrace("dropped must be 0 or 1, got '" + t[3] + "'");
        }
        int expLimit = Integer.parseInt(t[4]);
        boolean hasEst = t.length >= 6;
        long expEst = (hasEst && !kind.equals("AIMD")) ? parseBits(t[5]) : 0; // AIMD: not parsed
        String extra = t.length >= 7 ? t[6] : null;
        if (!kind.equals("AIMD") && !hasEst) {
            throw new BadTrace(kind + " S line needs the estimate bits column");
        }

        Stats st = stats.get(kind);
        st.samples++;
        int idx = sampleIdx++;
        if (aborted || !ensureBuilt(lineNo)) {
            return;
        }
        try {
            limit.onSample(0, rtt, inflight, dropped);
        } catch (RuntimeException e) {
            aborted = true;
            mismatch("other", lineNo, idx, "onSample threw " + e + "; rest of sequence skipped");
            return;
        }

        int got = limit.getLimit();
        if (got != expLimit) {
            mismatch("limit", lineNo, idx, "limit expected " + expLimit + " got " + got);
        }
        try {
            switch (kind) {
                case "VEGAS": {
                    long bits = Double.doubleToRawLongBits(VEGAS_ESTIMATE.getDouble(limit));
                    if (bits != expEst) {
                        mismatch("estimate", lineNo, idx, "estimatedLimit expected " + dbl(expEst) + " got " + dbl(bits));
                    }
                    if (extra != null) {
                        long exp = Long.parseLong(extra);
                        long act = VEGAS_RTT_NOLOAD.getLong(limit);
                        if (exp != act) {
                            mismatch("other", lineNo, idx, "rtt_noload expected " + exp + " got " + act);
                        }
                    }
                    break;
                }
                case "GRADIENT2": {
                    long bits = Double.doubleToRawLongBits(G2_ESTIMATE.getDouble(limit));
                    if (bits != expEst) {
                        mismatch("estimate", lineNo, idx, "estimatedLimit expected " + dbl(expEst) + " got " + dbl(bits));
                    }
                    if (extra != null) {
                        long exp = parseBits(extra);
                        long act = Double.doubleToRawLongBits(((Measurement) G2_LONG_RTT.get(limit)).get().doubleValue());
                        if (exp != act) {
                            mismatch("other", lineNo, idx, "longRtt expected " + dbl(exp) + " got " + dbl(act));
                        }
                    }
                    break;
                }
                default:
                    break; // AIMD: estimate / extra columns ignored
            }
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private void mismatch(String what, long lineNo, String detail) {
        mismatch(what, lineNo, -1, detail);
    }

    private void mismatch(String what, long lineNo, int idx, String detail) {
        Stats st = stats.get(kind);
        switch (what) {
            case "limit": st.limitMismatches++; break;
            case "estimate": st.estimateMismatches++; break;
            default: st.otherMismatches++; break;
        }
        totalMismatches++;
        if (reported.size() < MAX_REPORTED) {
            reported.add(String.format("  seq %d (%s %d %d %d) sample %s line %d: %s",
                    seqNo, kind, initial, min, max, idx < 0 ? "-" : Integer.toString(idx), lineNo, detail));
        }
    }

    private void printSummary() {
        Stats total = new Stats();
        System.out.printf("%-10s %9s %10s %10s %10s %10s %10s%n",
                "kind", "sequences", "samples", "mm_limit", "mm_est", "mm_other", "draws");
        for (Map.Entry<String, Stats> e : stats.entrySet()) {
            row(e.getKey(), e.getValue());
            total.add(e.getValue());
        }
        row("TOTAL", total);
        if (total.mismatches() == 0) {
            System.out.println("OK: no mismatches");
        } else {
            System.out.println("MISMATCHES: " + total.mismatches() + " (showing first " + reported.size() + ")");
            reported.forEach(System.out::println);
        }
    }

    private static void row(String name, Stats s) {
        System.out.printf("%-10s %9d %10d %10d %10d %10d %10d%n",
                name, s.sequences, s.samples, s.limitMismatches, s.estimateMismatches, s.otherMismatches, s.drawsUsed);
    }
}
