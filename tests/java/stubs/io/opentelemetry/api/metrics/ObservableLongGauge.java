package io.opentelemetry.api.metrics;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface ObservableLongGauge {
}
