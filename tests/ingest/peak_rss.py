"""The peak-memory probe the ingest memory tests' child processes share: this process image's own peak from
/proc (VmHWM), not ru_maxrss, which Linux carries over from the parent across fork + exec (a child would start
at pytest's peak and every bound would pass). Pasted into each child's code as `hwm()`, in MB."""

HWM = '''def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
'''
