"""Reading the user's input data files (numpy only; below ``numeric/``, which runs the stages on them).

Modules: ``spec`` (InputSpec, how arrays split into samples), ``arrays`` (.npy headers with numpy.lib.format, .npz
members, raw files), ``readers`` (samples streamed from them), ``images`` (Pillow), ``source`` (``open_data``:
DataSource), ``hbcal`` (hb_mapper 1.x raw calibration folders, ``open_stage_data``), ``random`` (random samples),
``stats`` and ``samplestats`` (statistics of the data for the input-contract rules).
"""
