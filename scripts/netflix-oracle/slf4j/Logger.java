package org.slf4j;

/** Minimal no-op stand-in for slf4j's Logger (only what the compiled Netflix classes call). */
public interface Logger {
    void warn(String format, Object... args);
    void debug(String format, Object... args);
    void info(String format, Object... args);
    boolean isDebugEnabled();
}
