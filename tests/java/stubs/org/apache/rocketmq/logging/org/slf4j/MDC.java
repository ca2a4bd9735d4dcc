package org.apache.rocketmq.logging.org.slf4j;

/** Stub of RocketMQ's shaded slf4j MDC: forwards to plain slf4j. */
public final class MDC {
    private MDC() {
    }

    public static void put(String key, String value) {
        org.slf4j.MDC.put(key, value);
    }

    public static void remove(String key) {
        org.slf4j.MDC.remove(key);
    }

    public static String get(String key) {
        return org.slf4j.MDC.get(key);
    }

    public static void clear() {
        org.slf4j.MDC.clear();
    }
}
