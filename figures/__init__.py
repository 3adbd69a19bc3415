"""The paper's figures (``accum figures``): specs -> saved measurements -> theory overlays -> drawings.

specs     each figure's measurement jobs, quick and default sizes
data      saved records, one JSON per job named by its hash; computed only when missing or invalid
overlays  theory curves at the measured points, from ``accum.theory``
plots     one pure drawing function per figure (records in, matplotlib Figure out)
captions  the caption text saved beside each figure
make      the whole run: data, drawings, atomic PNG + PDF + caption files
cli       ``add_figures(sub)``, the ``figures`` sub-command
"""
