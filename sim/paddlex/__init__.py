"""PaddleX simulator: the genuine PaddleX serving app over a stand-in PaddleOCR-VL pipeline.

`build_app(config_path)` (in `sim.paddlex.app`) gives the same FastAPI app `paddlex --serve`
runs; the stand-in pipeline sends every page to the vLLM named by the pipeline YAML's
`SubModules.VLRecognition.genai_config.server_url` and returns the answer as the page text.
"""
