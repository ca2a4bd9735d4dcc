package io.opentelemetry.sdk.metrics;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public enum InstrumentType {
    COUNTER, UP_DOWN_COUNTER, HISTOGRAM, OBSERVABLE_COUNTER, OBSERVABLE_UP_DOWN_COUNTER, OBSERVABLE_GAUGE
}
