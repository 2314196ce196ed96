"""Earshot's runtime core: what both the app and the trainers stand on.

One audio path (`audio`), checkpoints (`checkpoints`), atomic files (`files`), devices (`device`), run events
(`events`), settings metadata and the list of model kinds (`config`, `kinds`), multi-process helpers
(`distributed`), pretrained weight loaders (`aisfx_weights`, `speech_embedding_weights`), the ONNX runtime of the
aiSFX trunk (`aisfx_runtime`) and `inference.load_for_inference(path)`. Nothing here imports Qt, `app/` or
`training/`.
"""
