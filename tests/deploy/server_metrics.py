"""The metric families normsvc exports, as fixed by the server's interface.

The deploy artefacts (rules, dashboard, autoscaling) may only read these,
the recording rules built from them, and the few series named in
OTHER_SERIES; tests/deploy checks every name they use against this table.
"""

COUNTERS = {
    "normsvc_requests_total",
    "normsvc_request_rows_total",
    "normsvc_processed_bytes_total",
    "normsvc_rejected_requests_total",
    "normsvc_heap_releases_total",
    "normsvc_heap_released_bytes_total",
    "process_cpu_seconds_total",
}
HISTOGRAMS = {
    "normsvc_request_duration_seconds",
    "normsvc_queue_wait_seconds",
    "normsvc_batch_h2d_seconds",
    "normsvc_batch_kernel_seconds",
    "normsvc_batch_d2h_seconds",
    "normsvc_batch_rows",
    "normsvc_batch_requests",
    "normsvc_kernel_bandwidth_bytes_per_second",
}
GAUGES = {
    "normsvc_pending_requests",
    "normsvc_pending_rows",
    "normsvc_batches_in_flight",
    "normsvc_device_copy_bandwidth_bytes_per_second",
    "nv_gpu_utilization",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_memory_total_bytes",
    "normsvc_build_info",
    "normsvc_heap_allocated_bytes",
    "normsvc_heap_free_bytes",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_start_time_seconds",
    "process_threads",
}
# Families a CPU-backend server need not export (GPU stages, NVML).
GPU_ONLY = {
    "normsvc_batch_h2d_seconds",
    "normsvc_batch_d2h_seconds",
    "normsvc_batch_kernel_seconds",
    "normsvc_kernel_bandwidth_bytes_per_second",
    "normsvc_device_copy_bandwidth_bytes_per_second",
    "nv_gpu_utilization",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_memory_total_bytes",
}
# Series that come from Prometheus itself or kube-state-metrics.
OTHER_SERIES = {
    "up",
    "kube_horizontalpodautoscaler_status_current_replicas",
    "kube_horizontalpodautoscaler_status_desired_replicas",
    "kube_horizontalpodautoscaler_spec_max_replicas",
}


def series_names():
    """Every series name a scrape of normsvc can produce."""
    names = set(COUNTERS) | set(GAUGES)
    for h in HISTOGRAMS:
        names |= {h + "_bucket", h + "_sum", h + "_count"}
    return names
