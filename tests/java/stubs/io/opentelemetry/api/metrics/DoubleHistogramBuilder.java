package io.opentelemetry.api.metrics;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface DoubleHistogramBuilder {
    DoubleHistogramBuilder setDescription(String description);

    DoubleHistogramBuilder setUnit(String unit);

    LongHistogramBuilder ofLongs();
}
