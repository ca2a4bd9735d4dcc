package io.opentelemetry.sdk.metrics;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public final class View {
    public static ViewBuilder builder() {
        return new ViewBuilder();
    }
}
