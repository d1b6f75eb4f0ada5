package org.slf4j;

/** Minimal stand-in for slf4j's LoggerFactory: always returns a silent logger. */
public final class LoggerFactory {
    private static final Logger NOP = new Logger() {
        @Override public void warn(String format, Object... args) { }
        @Override public void debug(String format, Object... args) { }
        @Override public void info(String format, Object... args) { }
        @Override public boolean isDebugEnabled() { return false; }
    };

    private LoggerFactory() { }

    public static Logger getLogger(Class<?> clazz) { return NOP; }

    public static Logger getLogger(String name) { return NOP; }
}
