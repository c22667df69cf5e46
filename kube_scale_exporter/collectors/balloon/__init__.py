"""Balloon headroom: collector.py (flags, informers), selector.py (--balloon.selector),
preemptions.py (counted from pod events), summary.py (the cached objects summed up),
state.py (the state and its exposition), advice.py (`check`)."""

from kube_scale_exporter.collectors.balloon.collector import BalloonCollector

__all__ = ["BalloonCollector"]
