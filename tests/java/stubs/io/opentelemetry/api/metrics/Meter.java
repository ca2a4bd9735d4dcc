package io.opentelemetry.api.metrics;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface Meter {
    DoubleGaugeBuilder gaugeBuilder(String name);

    LongCounterBuilder counterBuilder(String name);

    DoubleHistogramBuilder histogramBuilder(String name);

    LongUpDownCounterBuilder upDownCounterBuilder(String name);
}
