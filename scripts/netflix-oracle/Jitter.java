package com.netflix.concurrency.limits.limit;

import java.util.ArrayDeque;

/**
 * Oracle-only replacement for VegasLimit's ThreadLocalRandom.current().nextDouble(0.5, 1):
 * a FIFO of draws fed by the harness. Not part of Netflix's code.
 */
public final class Jitter {
    private static final ArrayDeque<Double> QUEUE = new ArrayDeque<>();
    private static long used = 0;

    private Jitter() { }

    public static double next() {
        Double d = QUEUE.pollFirst();
        if (d == null) {
            throw new IllegalStateException("Jitter queue is empty: a draw was requested but no J line supplied it");
        }
        used++;
        return d;
    }

    public static void push(double d) { QUEUE.addLast(d); }

    public static int size() { return QUEUE.size(); }

    public static void clear() { QUEUE.clear(); }

    /** Removes the n oldest queued draws (not counted as used). */
    public static void discardOldest(int n) {
        for (int i = 0; i < n; i++) {
            QUEUE.pollFirst();
        }
    }

    /** Total number of draws consumed so far. */
    public static long used() { return used; }
}
